"""A tiny MLP's SGD training steps on CUDA, for `vramlab estimate`'s tests
(xtask/tests/estimate_cli.rs). --batch and --hidden set its size."""

import argparse

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--hidden", type=int, default=1024)
    args = p.parse_args()
    nn = torch.nn
    model = nn.Sequential(nn.Linear(256, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(2):
        x = torch.randn(args.batch, 256, device="cuda")
        y = torch.randint(0, 10, (args.batch,), device="cuda")
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    print("tiny_mlp: done")


if __name__ == "__main__":
    main()
