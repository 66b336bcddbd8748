"""The `record_stream` workload of gpu-check/record_snapshots.py (tensors used on a side stream, freed after record_stream), run as a script."""
from _workloads import run

kept = run("record_stream")
