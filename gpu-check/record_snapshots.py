#!/usr/bin/env python3
"""Real PyTorch memory snapshots, recorded on this machine's GPU, as fixtures
for vramlab's snapshot importer (`tests/data/torch-snapshots/`).

Usage: record_snapshots.py OUT_DIR

For each workload -- `mlp` (a 3-layer MLP's SGD training steps), `cnn` (a
small CNN's Adam steps, cuDNN in the loop) and `transformer` (an encoder
layer's AdamW steps under bf16 autocast) -- and each allocator setting --
`default` and `expandable` (`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`)
-- a fresh Python process records the memory history from its first CUDA
allocation (`torch.cuda.memory._record_memory_history`), runs three steps,
frees everything but the model and optimizer, and writes:

- OUT_DIR/WORKLOAD-SETTING.pickle: `torch.cuda.memory._dump_snapshot`;
- OUT_DIR/WORKLOAD-SETTING.stats.json: `torch.cuda.memory_stats()` at the
  same moment, with the torch version, the device and the setting.

A fresh process per snapshot, so that each one's trace starts from an empty
allocator and replays from nothing. Progress on stderr; exit status 0 when
every snapshot was written, 1 when one failed (the others are still written),
3 when torch or a CUDA device is missing. Needs only python3 and torch.
"""

import json
import os
import subprocess
import sys

WORKLOADS = ("mlp", "cnn", "transformer")
SETTINGS = {"default": "", "expandable": "expandable_segments:True"}
STEPS = 3
MAX_ENTRIES = 1_000_000
TIMEOUT_S = 120


def log(msg):
    print(f"record_snapshots: {msg}", file=sys.stderr, flush=True)


def classifier_steps(torch, model, opt, batch):
    """STEPS cross-entropy training steps of `model` on `batch(generator)` = (x, y)."""
    g = torch.Generator(device="cuda").manual_seed(0)
    for _ in range(STEPS):
        x, y = batch(g)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del x, y, loss
    return model, opt


def mlp(torch):
    nn = torch.nn
    model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 10))
    model = model.cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return classifier_steps(
        torch,
        model,
        opt,
        lambda g: (
            torch.randn(256, 1024, device="cuda", generator=g),
            torch.randint(0, 10, (256,), device="cuda", generator=g),
        ),
    )


def cnn(torch):
    nn = torch.nn
    torch.backends.cudnn.benchmark = True
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(64, 128, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(128, 10),
    ).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    return classifier_steps(
        torch,
        model,
        opt,
        lambda g: (
            torch.randn(64, 3, 64, 64, device="cuda", generator=g),
            torch.randint(0, 10, (64,), device="cuda", generator=g),
        ),
    )


def transformer(torch):
    nn = torch.nn
    model = nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048, batch_first=True).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator(device="cuda").manual_seed(0)
    for _ in range(STEPS):
        x = torch.randn(32, 128, 512, device="cuda", generator=g)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del x, loss
    return model, opt


def record_one(workload, setting, out_dir):
    """In this process: record WORKLOAD under SETTING (already in the environment)."""
    import torch

    if not torch.cuda.is_available():
        log("no CUDA device")
        return 3
    torch.cuda.memory._record_memory_history(max_entries=MAX_ENTRIES)
    kept = globals()[workload](torch)
    torch.cuda.synchronize()
    name = f"{workload}-{setting}"
    torch.cuda.memory._dump_snapshot(os.path.join(out_dir, f"{name}.pickle"))
    stats = dict(torch.cuda.memory_stats())
    torch.cuda.memory._record_memory_history(enabled=None)
    meta = {
        "workload": workload,
        "setting": setting,
        "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "device": torch.cuda.get_device_name(0),
        "steps": STEPS,
        "memory_stats": stats,
    }
    with open(os.path.join(out_dir, f"{name}.stats.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
        f.write("\n")
    del kept
    return 0


def main(argv):
    if len(argv) == 5 and argv[1] == "--one":
        return record_one(argv[2], argv[3], argv[4])
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out_dir = argv[1]
    try:
        import torch
    except ImportError as e:
        log(f"no PyTorch ({e})")
        return 3
    if not torch.cuda.is_available():
        log(f"no CUDA device (torch {torch.__version__}, built for CUDA {torch.version.cuda})")
        return 3
    os.makedirs(out_dir, exist_ok=True)
    failed = []
    for setting, conf in SETTINGS.items():
        for workload in WORKLOADS:
            env = dict(os.environ)
            env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
            if conf:
                env["PYTORCH_CUDA_ALLOC_CONF"] = conf
            log(f"recording {workload}-{setting}")
            try:
                done = subprocess.run(
                    [sys.executable, os.path.abspath(__file__), "--one", workload, setting, out_dir],
                    env=env,
                    timeout=TIMEOUT_S,
                )
                status = done.returncode
            except subprocess.TimeoutExpired:
                status = "timed out"
            if status == 3:
                return 3
            if status != 0:
                log(f"{workload}-{setting} failed ({status})")
                failed.append(f"{workload}-{setting}")
    if failed:
        log(f"failed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
