"""A tiny MLP's SGD training steps on CUDA, for `vramlab estimate`'s tests
(xtask/tests/estimate_cli.rs). --batch and --hidden set its size; --refuse
makes it do what a capture without a GPU cannot (a data-dependent `.item()`,
or `nonzero`) on its second step, after the first step's requests."""

import argparse

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--refuse", choices=["item", "nonzero"])
    args = p.parse_args()
    nn = torch.nn
    model = nn.Sequential(nn.Linear(256, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(2):
        x = torch.randn(args.batch, 256, device="cuda")
        y = torch.randint(0, 10, (args.batch,), device="cuda")
        loss = nn.functional.cross_entropy(model(x), y)
        if step == 1 and args.refuse == "item":
            print(f"loss {loss.item()}")
        if step == 1 and args.refuse == "nonzero":
            print(f"{(y > 4).nonzero().shape[0]} labels above 4")
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    print("tiny_mlp: done")


if __name__ == "__main__":
    main()
