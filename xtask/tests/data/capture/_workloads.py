"""The workloads of gpu-check/record_snapshots.py, imported from that file (the very
code that recorded tests/data/torch-snapshots on the H100) and run as scripts: what
`vramlab estimate` captures in the tests (xtask/tests/capture.rs, estimate_cli.rs)."""
import importlib.util
import os
import sys

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
_PATH = os.path.join(_HERE, "..", "..", "..", "..", "gpu-check", "record_snapshots.py")


def run(name):
    """Runs workload `name`; its result is returned to be kept alive to the end, as
    record_snapshots.py keeps it until its dump. `--batch N` in the arguments sets
    the transformer's batch (32, the recording's, by default)."""
    spec = importlib.util.spec_from_file_location("record_snapshots", _PATH)
    workloads = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(workloads)
    if "--batch" in sys.argv:
        workloads.TRANSFORMER_BATCH = int(sys.argv[sys.argv.index("--batch") + 1])
    return getattr(workloads, name)(torch)
