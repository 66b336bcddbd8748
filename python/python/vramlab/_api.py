"""``vramlab.replay``, ``vramlab.whatif`` and ``vramlab.diff``, in this process.

Each runs the ``vramlab`` command's own code (through the extension module,
the GIL released) and gives back an object over the document the command
prints with ``--json``; its page is the command's ``--report`` page.
"""

import os

from . import _native
from ._errors import UsageError

#: The name a snapshot given as a dict or as bytes has in documents and messages.
DICT_NAME = "<snapshot dict>"
BYTES_NAME = "<snapshot bytes>"


def _source(src, what="src"):
    """(name, bytes or path) of a snapshot given as a path, bytes or a dict."""
    if isinstance(src, (dict, list)):
        # What torch.cuda.memory._dump_snapshot() writes: pickle.dump of this
        # very object (torch/cuda/memory.py), so the dict and its file replay alike.
        import pickle

        return DICT_NAME, pickle.dumps(src, protocol=pickle.DEFAULT_PROTOCOL)
    if isinstance(src, (bytes, bytearray, memoryview)):
        return BYTES_NAME, bytes(src)
    if isinstance(src, (str, os.PathLike)):
        path = os.fspath(src)
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        return path, path
    raise UsageError(
        "%s must be a snapshot file's path, its bytes, or the dict torch.cuda.memory._snapshot() "
        "returns; got %s" % (what, type(src).__name__)
    )


def _size(name, value):
    """A size flag's value: bytes as an int, or a string such as ``"24GiB"``."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise UsageError("%s must be bytes (an int) or a size such as '24GiB'; got %r" % (name, value))
    return str(value)


def _flags(capacity=None, alloc_conf=None, device=None, fraction=None):
    flags = []
    if capacity is not None:
        flags += ["--capacity", _size("capacity", capacity)]
    if alloc_conf is not None:
        for conf in [alloc_conf] if isinstance(alloc_conf, str) else list(alloc_conf):
            flags += ["--alloc-conf", str(conf)]
    if device is not None:
        flags += ["--device", str(int(device))]
    if fraction is not None:
        flags += ["--fraction", repr(float(fraction))]
    return flags


def _iframe(index_html):
    """A page as a notebook cell's output: the whole page in an iframe, so that
    its styles and scripts stay its own; offline (the page fetches nothing)."""
    import html

    with open(index_html, encoding="utf-8") as f:
        page = f.read()
    return (
        '<iframe class="vramlab-report" srcdoc="%s" style="width:100%%;height:720px;border:1px solid #ddd" '
        "onload=\"try{this.style.height=(this.contentDocument.documentElement.scrollHeight+24)+'px'}catch(e){}\">"
        "</iframe>" % html.escape(page, quote=True)
    )


class _Result:
    """What the three results share: the document, the page, the notebook view."""

    _command = ""

    def __init__(self, doc, rerun):
        self._doc = doc
        self._rerun = rerun

    def to_dict(self):
        """The JSON document the command prints with ``--json``, as a dict (a copy)."""
        import copy

        return copy.deepcopy(self._doc)

    def save_report(self, dir):
        """Writes the command's ``--report`` page into ``dir`` (created if needed),
        offline: ``index.html``, its charts as PNG and SVG, and a Perfetto trace.
        Returns the path of ``index.html``."""
        import pathlib

        dir = pathlib.Path(os.fspath(dir))
        self._rerun(["--report", str(dir)])
        return dir / "index.html"

    def _repr_html_(self):
        """The page inline in a notebook: the summary and the interactive timeline."""
        import tempfile

        with tempfile.TemporaryDirectory(prefix="vramlab-page-") as d:
            return _iframe(self.save_report(d))


class Replay(_Result):
    """A snapshot replayed through vramlab's model of PyTorch's caching allocator.

    Every attribute reads the document ``vramlab replay --json`` prints
    (:meth:`to_dict`): the peaks, ``torch.cuda.memory_stats()`` at the end
    keyed as PyTorch keys it, the keys the trace cannot determine, the
    out-of-memory errors, the fidelity check against the recording, and who
    holds the memory at the allocated peak and at each OOM.
    """

    _command = "replay"

    @property
    def source(self):
        """The snapshot's name: its path, or ``<snapshot dict>`` / ``<snapshot bytes>``."""
        return self._doc["input"]

    @property
    def device(self):
        """The device whose trace was replayed."""
        return self._doc["device"]

    @property
    def peak_reserved_bytes(self):
        """The peak of reserved memory (``max_memory_reserved()``)."""
        return self._doc["peak_reserved_bytes"]

    @property
    def peak_allocated_bytes(self):
        """The peak of allocated memory (``max_memory_allocated()``)."""
        return self._doc["peak_allocated_bytes"]

    @property
    def final_reserved_bytes(self):
        return self._doc["final_reserved_bytes"]

    @property
    def final_allocated_bytes(self):
        return self._doc["final_allocated_bytes"]

    @property
    def memory_stats(self):
        """``torch.cuda.memory_stats()`` at the end of the replay, keyed as PyTorch
        keys it. The keys in :attr:`underivable` are not PyTorch's numbers."""
        return dict(self._doc["memory_stats"])

    @property
    def underivable(self):
        """The ``memory_stats`` keys the trace cannot determine (their reasons in
        ``to_dict()["underivable_stats"]``): left out of every comparison."""
        return [s["key"] for s in self._doc["underivable_stats"]]

    @property
    def ooms(self):
        """The replay's out-of-memory errors, each with PyTorch's message."""
        return list(self._doc["ooms"])

    @property
    def oom_requests(self):
        """Each out-of-memory the recording holds, made again: served or failed, by how much."""
        return list(self._doc["oom_requests"])

    @property
    def fidelity(self):
        """The check of the replay against the recording's segments and
        placements, or ``None`` where none applies (another setting, a window)."""
        return self._doc["fidelity"]

    @property
    def holders(self):
        """Who holds the memory at the allocated peak (and at each OOM): the live
        blocks grouped by the call path of your own code, largest first, each
        row with its frames."""
        return list(self._doc["attribution"])

    def __repr__(self):
        return "<vramlab.Replay of %s: device %s, peak reserved %d bytes, peak allocated %d bytes, %d OOM(s)>" % (
            self.source,
            self.device,
            self.peak_reserved_bytes,
            self.peak_allocated_bytes,
            len(self.ooms),
        )


class WhatIf(_Result):
    """A snapshot replayed under other allocator settings and capacities: the
    document ``vramlab whatif --json`` prints (:meth:`to_dict`)."""

    _command = "whatif"

    def __init__(self, doc, rerun, exit_status):
        super().__init__(doc, rerun)
        #: 0, or 1 when a device of a snapshot of several could not be replayed.
        self.exit_status = exit_status

    @property
    def results(self):
        """Each setting tried (the recorded one first): its peaks, fragmentation,
        segment allocations and out-of-memory, if any."""
        return list(self._doc.get("results", []))

    @property
    def recommended(self):
        """The recommended ``PYTORCH_CUDA_ALLOC_CONF`` ("" for PyTorch's
        defaults), or ``None`` when nothing was compared or nothing fits."""
        return self._doc.get("recommended")

    @property
    def smaller_batch(self):
        """At a recorded OOM, whether a smaller batch would have fitted (a model), else ``None``."""
        return self._doc.get("smaller_batch")

    @property
    def holders(self):
        """Who holds the memory at the allocated peak, by your own call path."""
        return list(self._doc.get("attribution", []))

    def __repr__(self):
        rec = self.recommended
        return "<vramlab.WhatIf: %d setting(s), recommended %s>" % (
            len(self.results),
            "none" if rec is None else repr(rec or "PyTorch defaults"),
        )


class Diff(_Result):
    """Two snapshots compared: the document ``vramlab diff --json`` prints (:meth:`to_dict`)."""

    _command = "diff"

    @property
    def before(self):
        return self._doc["before"]

    @property
    def after(self):
        return self._doc["after"]

    @property
    def peak_allocated_change_bytes(self):
        return self._doc["peak_allocated_change_bytes"]

    @property
    def peak_reserved_change_bytes(self):
        return self._doc["peak_reserved_change_bytes"]

    @property
    def paths(self):
        """The call paths that gained or lost bytes at the allocated peak, largest change first."""
        return list(self._doc["paths"])

    def __repr__(self):
        return "<vramlab.Diff: peak reserved %+d bytes, peak allocated %+d bytes>" % (
            self.peak_reserved_change_bytes,
            self.peak_allocated_change_bytes,
        )


def replay(src, capacity=None, alloc_conf=None, device=None, fraction=None):
    """Replays a PyTorch memory snapshot through vramlab's model of the CUDA
    caching allocator, in this process, as ``vramlab replay SRC --json`` does.

    src: a snapshot file's path (``torch.cuda.memory._dump_snapshot()``), its
        bytes, or the dict ``torch.cuda.memory._snapshot()`` returns (it
        replays as its file does).
    capacity: the simulated device's memory, bytes or a size such as
        ``"24GiB"`` (default: unlimited, or the capacity the recorded OOMs imply).
    alloc_conf: allocator settings in ``PYTORCH_CUDA_ALLOC_CONF`` syntax
        (default: the snapshot's own).
    device: the device whose trace to replay (default: the one with the most entries).
    fraction: ``torch.cuda.set_per_process_memory_fraction(fraction)`` on the
        simulated device.

    Returns a :class:`Replay`: the peaks, ``memory_stats`` keyed as PyTorch keys
    it and the ``underivable`` keys, ``ooms``, ``fidelity``, ``holders`` (who
    holds the peak, with frames), ``to_dict()`` and ``save_report(dir)``; in a
    notebook it shows its page. Raises a :class:`vramlab.Error`.
    """
    name, source = _source(src)
    flags = _flags(capacity, alloc_conf, device, fraction)
    import json

    doc = json.loads(_native.replay(name, source, flags))
    return Replay(doc, lambda more: _native.replay(name, source, flags + more))


def whatif(src, capacity=None, sweep=True, fraction=None, alloc_conf=None, device=None):
    """Replays a snapshot under other allocator settings and capacities, as
    ``vramlab whatif SRC --sweep --json`` does: would it fit, and with which setting?

    src: a path, bytes or a snapshot dict, as for :func:`replay`.
    capacity: the simulated device's memory (bytes or ``"24GiB"``).
    sweep: try the grid of ``expandable_segments``, ``max_split_size_mb`` and
        ``roundup_power2_divisions`` settings and recommend one.
    fraction: a per-process memory fraction on the simulated device.
    alloc_conf: one setting or a list of settings to try as well.
    device: the device whose trace to replay.

    Returns a :class:`WhatIf` (``results``, ``recommended``, ``smaller_batch``,
    ``holders``, ``to_dict()``, ``save_report(dir)``). Raises a :class:`vramlab.Error`.
    """
    name, source = _source(src)
    flags = _flags(capacity, alloc_conf, device, fraction) + (["--sweep"] if sweep else [])
    import json

    out, status = _native.whatif(name, source, flags)
    return WhatIf(json.loads(out), lambda more: _native.whatif(name, source, flags + more), status)


def diff(a, b, device=None):
    """Compares two snapshots (``a`` before, ``b`` after), each replayed under
    its own settings, as ``vramlab diff A B --json`` does: the peaks and their
    change, the call paths that gained or lost bytes, the segments.

    a, b: paths, bytes or snapshot dicts, as for :func:`replay`.
    device: the device whose traces to compare.

    Returns a :class:`Diff`. Raises a :class:`vramlab.Error`.
    """
    (a_name, a_src), (b_name, b_src) = _source(a, "a"), _source(b, "b")
    if a_name == b_name and not isinstance(a_src, str):
        a_name, b_name = a_name + " A", b_name + " B"
    flags = _flags(device=device)
    import json

    doc = json.loads(_native.diff((a_name, b_name), a_src, b_src, flags))
    return Diff(doc, lambda more: _native.diff((a_name, b_name), a_src, b_src, flags + more))
