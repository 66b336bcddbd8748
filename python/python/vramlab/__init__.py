"""vramlab for Python: PyTorch memory snapshots replayed, in this process,
through vramlab's exact model of PyTorch's CUDA caching allocator.

- ``vramlab.replay(src)``: the peaks, ``memory_stats()`` keyed as PyTorch keys
  it, the keys a trace cannot determine, the OOMs, the fidelity check against
  the recording and who holds the peak, by your own call path.
- ``vramlab.whatif(src, capacity="24GiB")``: other allocator settings and
  capacities, and the one to use.
- ``vramlab.diff(a, b)``: what changed between two snapshots.
- ``with vramlab.record() as rec:``: records the block's CUDA memory and replays it.

``src`` is a snapshot file (``torch.cuda.memory._dump_snapshot()``), its
bytes, or the dict ``torch.cuda.memory._snapshot()`` returns. Each result has
``to_dict()`` (the ``--json`` document of the ``vramlab`` command, which
``pip install`` also puts on your path) and ``save_report(dir)``, and shows
its page in a notebook. Errors are :class:`vramlab.Error`.
"""

from ._api import Diff, Replay, WhatIf, diff, replay, whatif
from ._errors import Error, ReplayError, ReportError, SnapshotError, UsageError
from ._native import __version__
from ._record import record

__all__ = [
    "Diff",
    "Error",
    "Replay",
    "ReplayError",
    "ReportError",
    "SnapshotError",
    "UsageError",
    "WhatIf",
    "__version__",
    "diff",
    "record",
    "replay",
    "whatif",
]
