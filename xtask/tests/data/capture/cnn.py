"""The `cnn` workload of gpu-check/record_snapshots.py (a small CNN's Adam steps under cudnn.benchmark), run as a script."""
from _workloads import run

kept = run("cnn")
