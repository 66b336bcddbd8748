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

Then the workloads of the replay's harder kinds, each once under the default
setting (OUT_DIR/WORKLOAD-default.*): `cudagraph` (warm-up on a side stream,
one training step captured with `torch.cuda.graph` into a private pool, replayed,
then eager tensors), `compiled` (`torch.compile(mode="reduce-overhead")`:
cudagraph trees), `record_stream` (tensors used on a side stream and freed after
`record_stream`, one free still pending at the dump), `oom_backoff` (a memory
fraction of 3 GiB, a batch that runs out of memory, halved until it fits),
`amp_cudnn` (the CNN under fp16 autocast with a GradScaler and
`cudnn.benchmark`) and `resnet50` (torchvision's ResNet-50, channels_last,
fp16 autocast, `cudnn.benchmark`; skipped when torchvision is missing).

A fresh process per snapshot, so that each one's trace starts from an empty
allocator and replays from nothing. Progress on stderr; exit status 0 when
every snapshot was written, 1 when one failed (the others are still written),
3 when torch or a CUDA device is missing. Needs only python3 and torch
(torchvision for `resnet50`, a working `torch.compile` for `compiled`; a
workload whose library is missing is skipped and said so, not failed).
"""

import json
import os
import subprocess
import sys

WORKLOADS = ("mlp", "cnn", "transformer")
SETTINGS = {"default": "", "expandable": "expandable_segments:True"}
# The replay's harder kinds, recorded once each under the default setting.
EXTRA_WORKLOADS = ("cudagraph", "compiled", "record_stream", "oom_backoff", "amp_cudnn", "resnet50")
STEPS = 3
MAX_ENTRIES = 1_000_000
TIMEOUT_S = 120
# torch.compile builds its kernels first.
TIMEOUTS_S = {"compiled": 600, "resnet50": 300}
# The exit status of a workload whose library is missing (skipped, not failed).
SKIPPED = 4
OOM_LIMIT_BYTES = 3 << 30
# The transformer's batch (vramlab's estimate tests vary it: xtask/tests/data/capture/).
TRANSFORMER_BATCH = 32


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
        x = torch.randn(TRANSFORMER_BATCH, 128, 512, device="cuda", generator=g)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del x, loss
    return model, opt


def cudagraph(torch):
    """Warm-up on a side stream, one training step captured with torch.cuda.graph
    (its __enter__ empties the cache; the capture allocates into a private
    pool), five replays with new input copied in, then eager tensors."""
    nn = torch.nn
    model = nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    static_x = torch.randn(512, 1024, device="cuda")
    static_y = torch.randint(0, 10, (512,), device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(STEPS):
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(static_x), static_y).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = torch.nn.functional.cross_entropy(model(static_x), static_y)
        static_loss.backward()
        opt.step()
    g = torch.Generator(device="cuda").manual_seed(0)
    for _ in range(5):
        static_x.copy_(torch.randn(512, 1024, device="cuda", generator=g))
        graph.replay()
    eager = [torch.empty(3 << 20, device="cuda") for _ in range(4)]
    del eager[0]
    return model, opt, graph, static_loss, eager


def compiled(torch):
    """torch.compile(mode="reduce-overhead"): cudagraph trees and their pool."""
    nn = torch.nn
    model = nn.Sequential(nn.Linear(1024, 2048), nn.GELU(), nn.Linear(2048, 1024)).cuda()
    step = torch.compile(model, mode="reduce-overhead")
    g = torch.Generator(device="cuda").manual_seed(0)
    outs = []
    for _ in range(STEPS + 2):
        x = torch.randn(256, 1024, device="cuda", generator=g)
        torch.compiler.cudagraph_mark_step_begin()
        outs.append(step(x).sum().item())
    return model, step, outs


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


def oom_backoff(torch):
    """A memory fraction that makes the limit 3 GiB; a batch that runs out of
    memory, the references dropped, empty_cache(), the batch halved until two
    steps fit."""
    nn = torch.nn
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, OOM_LIMIT_BYTES / total))
    model = nn.Sequential(nn.Linear(4096, 8192), nn.GELU(), nn.Linear(8192, 8192), nn.GELU(), nn.Linear(8192, 1000))
    model = model.cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    g = torch.Generator(device="cuda").manual_seed(0)
    batch, done = 16384, 0
    while done < 2 and batch >= 1:
        try:
            x = torch.randn(batch, 4096, device="cuda", generator=g)
            y = torch.randint(0, 1000, (batch,), device="cuda", generator=g)
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            done += 1
        except torch.cuda.OutOfMemoryError:
            x = y = None
            opt.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
            batch //= 2
            done = 0
        x = y = None
    return model, opt


def amp_steps(torch, model, batch):
    """STEPS SGD steps of `model` under fp16 autocast with a GradScaler, cuDNN benchmarking."""
    torch.backends.cudnn.benchmark = True
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda")
    g = torch.Generator(device="cuda").manual_seed(0)
    for _ in range(STEPS):
        x, y = batch(g)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        del x, y, loss
    return model, opt, scaler


def amp_cudnn(torch):
    nn = torch.nn
    model = nn.Sequential(
        nn.Conv2d(3, 64, 3, padding=1),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.Conv2d(64, 128, 3, padding=1, stride=2),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(128, 10),
    ).cuda()
    return amp_steps(
        torch,
        model,
        lambda g: (
            torch.randn(64, 3, 96, 96, device="cuda", generator=g),
            torch.randint(0, 10, (64,), device="cuda", generator=g),
        ),
    )


def resnet50(torch):
    import torchvision  # a missing torchvision skips this workload (see record_one)

    model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
    return amp_steps(
        torch,
        model,
        lambda g: (
            torch.randn(64, 3, 224, 224, device="cuda", generator=g).to(memory_format=torch.channels_last),
            torch.randint(0, 1000, (64,), device="cuda", generator=g),
        ),
    )


def record_one(workload, setting, out_dir):
    """In this process: record WORKLOAD under SETTING (already in the environment)."""
    import torch

    if not torch.cuda.is_available():
        log("no CUDA device")
        return 3
    torch.cuda.memory._record_memory_history(max_entries=MAX_ENTRIES)
    try:
        kept = globals()[workload](torch)
    except ImportError as e:
        log(f"{workload}: skipped, {e}")
        return SKIPPED
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
        "per_process_memory_fraction_limit_bytes": OOM_LIMIT_BYTES if workload == "oom_backoff" else None,
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
    runs = [(workload, setting, conf) for setting, conf in SETTINGS.items() for workload in WORKLOADS]
    runs += [(workload, "default", "") for workload in EXTRA_WORKLOADS]
    for workload, setting, conf in runs:
        env = dict(os.environ)
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        if conf:
            env["PYTORCH_CUDA_ALLOC_CONF"] = conf
        log(f"recording {workload}-{setting}")
        try:
            done = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--one", workload, setting, out_dir],
                env=env,
                timeout=TIMEOUTS_S.get(workload, TIMEOUT_S),
            )
            status = done.returncode
        except subprocess.TimeoutExpired:
            status = "timed out"
        if status == 3:
            return 3
        if status == SKIPPED:
            continue
        if status != 0:
            log(f"{workload}-{setting} failed ({status})")
            failed.append(f"{workload}-{setting}")
    if failed:
        log(f"failed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
