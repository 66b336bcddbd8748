"""The `transformer` workload of gpu-check/record_snapshots.py (an encoder layer's AdamW steps under bf16 autocast; `--batch N` sets its batch), run as a script."""
from _workloads import run

kept = run("transformer")
