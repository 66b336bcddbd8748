"""``vramlab.record()``: records this process's CUDA memory around a block of
code, with ``torch.cuda.memory._record_memory_history``, dumps a snapshot at
the end and at every out-of-memory error (the error still raises), then
replays them all into the report ``vramlab record`` writes.
"""

import os

from . import _native

_RANK_VARS = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK")
_counter = [0]


def _prefix():
    """``<host>[-rank<R>]-pid<P>-rec<K>``, as ``vramlab record``'s hook names its
    files (host, rank, process), with the recording's number in this process."""
    import socket

    host = "".join(c if c.isalnum() or c in "._" else "_" for c in socket.gethostname()) or "host"
    rank = next((os.environ[v].strip() for v in _RANK_VARS if os.environ.get(v, "").strip()), None)
    rank = "" if rank is None else "-rank" + "".join(c for c in rank if c.isalnum())
    _counter[0] += 1
    return "%s%s-pid%d-rec%d" % (host, rank, os.getpid(), _counter[0])


class record:
    """Records the CUDA memory of the code in a ``with`` block, in this process::

        with vramlab.record("out") as rec:
            train()
        rec.report      # out/report/index.html: a replay and a what-if page per snapshot
        rec.snapshots   # the snapshot files written
        rec.replays     # each replayed, a vramlab.Replay

    On entry it starts ``torch.cuda.memory._record_memory_history(max_entries,
    stacks)`` and attaches an out-of-memory observer; each OOM dumps a
    snapshot (``…-oomN.pickle``) and still raises. On exit, also by an
    exception, it dumps the final snapshot, stops recording, and replays every
    snapshot into ``out/report/``, as ``vramlab record -- CMD`` does.

    out: the folder for the snapshots and ``report/`` (default: a new temporary folder).
    max_entries, stacks: passed to ``_record_memory_history``.
    """

    def __init__(self, out=None, max_entries=1_000_000, stacks="python"):
        self.out = None if out is None else os.fspath(out)
        self.max_entries = max_entries
        self.stacks = stacks
        #: The snapshot files written, in order (the OOM dumps, then the final one).
        self.snapshots = []
        #: The index page of the report (``out/report/index.html``), after the block.
        self.report = None
        #: The report's summary, as ``vramlab record`` prints it.
        self.summary = ""
        self._prefix = None
        self._ooms = 0
        self._active = False
        self._replays = None

    def __enter__(self):
        import torch

        if self.out is None:
            import tempfile

            self.out = tempfile.mkdtemp(prefix="vramlab-record-")
        os.makedirs(self.out, exist_ok=True)
        self._prefix = _prefix()
        torch.cuda.memory._record_memory_history(max_entries=self.max_entries, stacks=self.stacks)
        self._active = True
        # PyTorch has no way to detach an observer: this one does nothing once the block ends.
        torch._C._cuda_attach_out_of_memory_observer(self._on_oom)
        return self

    def _dump(self, suffix):
        import torch

        path = os.path.join(self.out, self._prefix + suffix + ".pickle")
        part = path + ".part"
        try:
            torch.cuda.memory._dump_snapshot(part)
            # PyTorch's own statistics at the same moment, as `vramlab record`'s hook writes
            # them, so that each replay is checked against them key by key.
            _write_stats(torch, path[: -len(".pickle")] + ".stats.json")
            os.replace(part, path)
        except BaseException:
            # A disk that filled up mid-write: drop the piece, keep the snapshots already written.
            try:
                os.remove(part)
            except OSError:
                pass
            raise
        self.snapshots.append(path)

    def _on_oom(self, device, alloc, device_allocated, device_free):
        if not self._active:
            return
        self._ooms += 1
        self._dump("-oom%d" % self._ooms)

    def __exit__(self, kind, value, tb):
        import torch

        try:
            self._dump("")
        finally:
            self._active = False
            torch.cuda.memory._record_memory_history(enabled=None)
        what = "with vramlab.record()" + ("" if kind is None else " (raised %s)" % kind.__name__)
        self.summary, report = _native.record_report(self.out, self.snapshots, what, 0 if kind is None else 1)
        self.report = None if report is None else os.fspath(report)
        return False

    @property
    def replays(self):
        """Each snapshot replayed (:func:`vramlab.replay`), in the order of :attr:`snapshots`."""
        if self._replays is None:
            from ._api import replay

            self._replays = [replay(p) for p in self.snapshots]
        return self._replays

    def __repr__(self):
        return "<vramlab.record into %s: %d snapshot(s)%s>" % (
            self.out,
            len(self.snapshots),
            "" if self.report is None else ", report " + self.report,
        )


def _write_stats(torch, path):
    """Writes torch.cuda.memory_stats() of the current device as JSON at `path`
    (through a .part file), in the shape `vramlab record`'s hook writes; nothing
    when CUDA holds no statistics yet."""
    import json

    device = torch.cuda.current_device()
    stats = torch.cuda.memory_stats(device)
    if not stats:
        return
    doc = {
        "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "device": torch.cuda.get_device_name(device),
        "device_index": device,
        "memory_stats": dict(stats),
    }
    with open(path + ".part", "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
    os.replace(path + ".part", path)
