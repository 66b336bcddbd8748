"""The `mlp` workload of gpu-check/record_snapshots.py (a 3-layer MLP's SGD steps), run as a script."""
from _workloads import run

kept = run("mlp")
