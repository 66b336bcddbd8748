# vramlab record's hook, written as `sitecustomize.py` into a temporary folder that
# `vramlab record` puts first on the child's PYTHONPATH (shipped inside the binary).
#
# Every Python process of the recorded command imports it at start-up. It runs the
# `sitecustomize` it hides (if one is importable further along the path), then waits for
# `import torch`: once torch initialises CUDA it starts
# torch.cuda.memory._record_memory_history(max_entries=N, stacks=...), and dumps the
# snapshot on every OOM (PyTorch's out-of-memory observer), on an uncaught exception and
# at exit, as DIR/<host>[-rank<R>]-pid<P>[-oom<N>].pickle, with torch.cuda.memory_stats() read
# at the same moment beside it as the same name's .stats.json (written as .part, then renamed;
# a dump that fails, a full disk, leaves no .part and the snapshots already written; SIGINT
# waits while a dump is written). A Python that cannot import torch leaves a note,
# DIR/.vramlab-no-torch-<pid> holding its executable, for vramlab to say so.
# It never changes the program's output, behaviour or exit status: every failure of its
# own is swallowed with one line on stderr. Settings come from VRAMLAB_RECORD_DIR,
# VRAMLAB_RECORD_MAX_ENTRIES and VRAMLAB_RECORD_STACKS; without VRAMLAB_RECORD_DIR it
# only chains.

import os as _os
import sys as _sys

_HERE = _os.path.dirname(_os.path.abspath(__file__))
_DIR = _os.environ.get("VRAMLAB_RECORD_DIR")
_RANK_VARS = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK")
_state = {"recording": False, "final": False, "ooms": 0, "failed": False}


def _note(message):
    try:
        _sys.stderr.write("vramlab: " + message + "\n")
        _sys.stderr.flush()
    except Exception:
        pass


def _failed(what, e):
    # One line per process at most: the program goes on unrecorded where it must.
    if not _state["failed"]:
        _state["failed"] = True
        _note("the recording hook failed %s (%s: %s); the program runs on" % (what, type(e).__name__, e))


def _chain_failed(e):
    _note("the program's own sitecustomize raised %s: %s" % (type(e).__name__, e))


def _rank():
    for var in _RANK_VARS:
        value = _os.environ.get(var, "").strip()
        if value:
            return value
    return None


def _host():
    import socket

    return "".join(c if c.isalnum() or c in "._" else "_" for c in socket.gethostname()) or "host"


def _file_name(suffix):
    host = _state.get("host") or _host()
    rank = _rank()
    rank = "" if rank is None else "-rank" + "".join(c for c in rank if c.isalnum())
    return "%s%s-pid%d%s.pickle" % (host, rank, _os.getpid(), suffix)


def _dump(suffix):
    import torch

    path = _os.path.join(_DIR, _file_name(suffix))
    part = path + ".part"
    # A second Ctrl-C must not cut the snapshot short: SIGINT waits while it is written.
    previous = _hold_sigint()
    try:
        torch.cuda.memory._dump_snapshot(part)
        # PyTorch's own statistics at the same moment (nothing allocates in between), for
        # vramlab to check its replay against key by key.
        try:
            _write_stats(torch, path[: -len(".pickle")] + ".stats.json")
        except Exception as e:
            _failed("to write memory_stats beside the snapshot", e)
        _os.replace(part, path)
    except BaseException:
        # A disk that filled up mid-write: drop the piece, keep the snapshots already written.
        try:
            _os.remove(part)
        except OSError:
            pass
        raise
    finally:
        _release_sigint(previous)


def _write_stats(torch, path):
    """Writes torch.cuda.memory_stats() of the current device as JSON at `path`
    (through a .part file); nothing when CUDA holds no statistics yet."""
    import json

    device = torch.cuda.current_device()
    stats = torch.cuda.memory_stats(device)
    if not stats:
        return
    doc = {
        "PYTORCH_CUDA_ALLOC_CONF": _os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "device": torch.cuda.get_device_name(device),
        "device_index": device,
        "memory_stats": dict(stats),
    }
    with open(path + ".part", "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
    _os.replace(path + ".part", path)


def _hold_sigint():
    try:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            return signal.signal(signal.SIGINT, signal.SIG_IGN)
    except Exception:
        pass
    return None


def _release_sigint(previous):
    if previous is not None:
        try:
            import signal

            signal.signal(signal.SIGINT, previous)
        except Exception:
            pass


def _no_torch():
    """Leaves a note for `vramlab record`: this Python cannot import torch."""
    try:
        note = _os.path.join(_DIR, ".vramlab-no-torch-%d" % _os.getpid())
        with open(note, "w") as f:
            f.write(_sys.executable or "python")
    except Exception:
        pass


def _final():
    if _state["recording"] and not _state["final"]:
        _state["final"] = True
        try:
            _dump("")
        except Exception as e:
            _failed("to dump the snapshot at exit", e)


def _on_oom(device, alloc, device_allocated, device_free):
    _state["ooms"] += 1
    try:
        _dump("-oom%d" % _state["ooms"])
    except Exception as e:
        _failed("to dump the snapshot at an out-of-memory error", e)


def _excepthook_chain(previous):
    def excepthook(kind, value, tb):
        _final()
        previous(kind, value, tb)

    return excepthook


def _start():
    if _state["recording"]:
        return
    _state["recording"] = True
    try:
        import atexit

        import torch

        # What a dump needs is imported now: a first import inside the exception hook
        # (socket's) makes Python forget that an uncaught KeyboardInterrupt ends it by
        # SIGINT (exit status 130), and the program's status must stay its own.
        import signal  # noqa: F401
        import threading  # noqa: F401

        _state["host"] = _host()
        _os.makedirs(_DIR, exist_ok=True)
        max_entries = int(_os.environ.get("VRAMLAB_RECORD_MAX_ENTRIES", "1000000"))
        stacks = _os.environ.get("VRAMLAB_RECORD_STACKS", "python")
        torch.cuda.memory._record_memory_history(max_entries=max_entries, stacks=stacks)
        torch._C._cuda_attach_out_of_memory_observer(_on_oom)
        atexit.register(_final)
        _sys.excepthook = _excepthook_chain(_sys.excepthook)
        rank = _rank()
        head = "recording CUDA memory of pid %d%s:" % (_os.getpid(), "" if rank is None else " (rank %s)" % rank)
        tail = "snapshots go to %s" % _DIR
        # One line when it fits; else the folder on a line of its own.
        _note(head + (" " if len("vramlab: ") + len(head) + 1 + len(tail) <= 100 else "\n  ") + tail)
    except Exception as e:
        _state["recording"] = False
        _failed("to start recording", e)


def _patch_torch(torch):
    cuda = torch.cuda
    original = cuda._lazy_init
    if getattr(original, "_vramlab_record", False):
        return

    def _lazy_init(*args, **kwargs):
        result = original(*args, **kwargs)
        if not _state["recording"]:
            _start()
        return result

    _lazy_init._vramlab_record = True
    cuda._lazy_init = _lazy_init
    if cuda.is_initialized():
        _start()


class _TorchFinder:
    """Finds `torch` through the other finders and patches it once it has run.

    It stays on sys.meta_path until torch has been executed: a library probing
    with importlib.util.find_spec("torch") gets a spec that may never run."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        try:
            spec = None
            for finder in list(_sys.meta_path):
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(name, path, target)
                if spec is not None:
                    break
            if spec is None:
                _no_torch()
                return None
            loader = spec.loader
            exec_module = getattr(loader, "exec_module", None)
            if exec_module is None:
                return spec
            finder = self

            def exec_and_patch(module):
                exec_module(module)
                try:
                    _sys.meta_path.remove(finder)
                except ValueError:
                    pass
                try:
                    _patch_torch(module)
                except Exception as e:
                    _failed("to hook torch's CUDA initialisation", e)

            loader.exec_module = exec_and_patch
            return spec
        except Exception as e:
            _failed("to find torch", e)
            return None


# `_chain_sitecustomize` is `sitecustomize_chain.py`'s, written before this file.
_chain_sitecustomize(_HERE, _chain_failed)
if _DIR:
    try:
        if "torch" in _sys.modules:
            _patch_torch(_sys.modules["torch"])
        else:
            _sys.meta_path.insert(0, _TorchFinder())
    except Exception as e:
        _failed("to install itself", e)
