"""The `cnn` workload of gpu-check/record_snapshots.py, the same code, run as a
script: what `vramlab estimate` captures in the tests (xtask/tests/capture.rs)
to compare with the H100 recording tests/data/torch-snapshots/cnn-*.pickle."""
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


# Kept alive to the end, as record_snapshots.py keeps it until its dump.
kept = cnn(torch)
