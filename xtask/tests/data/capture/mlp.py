"""The `mlp` workload of gpu-check/record_snapshots.py, the same code, run as a
script: what `vramlab estimate` captures in the tests (xtask/tests/capture.rs)
to compare with the H100 recording tests/data/torch-snapshots/mlp-*.pickle."""
import torch

STEPS = 3


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


# Kept alive to the end, as record_snapshots.py keeps it until its dump.
kept = mlp(torch)
