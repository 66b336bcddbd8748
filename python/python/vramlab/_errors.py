"""The errors vramlab raises: one hierarchy under :class:`vramlab.Error`.

Each carries the message the ``vramlab`` command prints after ``error:`` for
the same input, and the command's exit status for it.
"""


class Error(Exception):
    """Every error of vramlab.

    ``message`` is what the ``vramlab`` command prints after ``error:`` for the
    same input; ``exit_status`` is the command's exit status for it (1 for bad
    input, 2 for a usage error or a report folder that cannot be written).
    """

    def __init__(self, message, exit_status=1):
        super().__init__(message)
        self.message = message
        self.exit_status = exit_status


class UsageError(Error, ValueError):
    """An argument the command line refuses: a capacity such as ``"12 parsecs"``,
    allocator settings PyTorch would not parse, a source of the wrong type."""

    def __init__(self, message, exit_status=2):
        super().__init__(message, exit_status)


class SnapshotError(Error):
    """The snapshot cannot be opened or read: no such file, not a pickle, or a
    pickle that is not a PyTorch memory snapshot (the message names the place)."""


class ReplayError(Error):
    """The snapshot was read but cannot be replayed as asked: a device without
    a trace, a capacity or memory fraction out of range."""


class ReportError(Error, OSError):
    """The report folder cannot be written."""

    def __init__(self, message, exit_status=2):
        super().__init__(message, exit_status)
