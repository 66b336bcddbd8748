"""The `transformer` workload of gpu-check/record_snapshots.py, the same code, run as a
script: what `vramlab estimate` captures in the tests (xtask/tests/capture.rs)
to compare with the H100 recording tests/data/torch-snapshots/transformer-*.pickle.
`--batch N` sets the batch (32, the recording's, by default): what `vramlab estimate
--search` varies in its tests (xtask/tests/estimate_cli.rs)."""
import sys

import torch

BATCH = int(sys.argv[sys.argv.index("--batch") + 1]) if "--batch" in sys.argv else 32

STEPS = 3


def transformer(torch):
    nn = torch.nn
    model = nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048, batch_first=True).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator(device="cuda").manual_seed(0)
    for _ in range(STEPS):
        x = torch.randn(BATCH, 128, 512, device="cuda", generator=g)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del x, loss
    return model, opt


# Kept alive to the end, as record_snapshots.py keeps it until its dump.
kept = transformer(torch)
