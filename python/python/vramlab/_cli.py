"""The ``vramlab`` console command that ``pip install`` puts on the path: the
same command line as the ``vramlab`` binary, run in this process by the
extension module, with the same output and exit status."""

import signal
import sys


def main():
    """Runs ``vramlab`` on ``sys.argv`` and exits with its status."""
    from . import _native

    # As the binary starts: Ctrl-C ends the command (`record` forwards it to
    # the program it records) rather than waiting for Python's handler.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.stdout.flush()
    sys.exit(_native.cli(["vramlab", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
