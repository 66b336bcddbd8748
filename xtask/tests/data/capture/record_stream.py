"""The `record_stream` workload of gpu-check/record_snapshots.py, the same code: tensors
made on the default stream, used on a side stream, freed after record_stream."""
import torch

STEPS = 3


def record_stream(torch):
    """Tensors made on the default stream, used on a side stream, freed after
    record_stream: each free completes at a later malloc; the last one is still
    pending at the dump (no allocation after it)."""
    side = torch.cuda.Stream()
    kept = []
    g = torch.Generator(device="cuda").manual_seed(0)
    for i in range(STEPS + 1):
        x = torch.randn(1024, 1024, device="cuda", generator=g)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            kept.append((x @ x).sum())
        x.record_stream(side)
        del x
        if i < STEPS:
            kept.append(torch.empty(1 << 20, device="cuda"))
    return kept


kept = record_stream(torch)
