"""A program that fails on its own after some CUDA work: no capture is kept."""
import torch

x = torch.randn(8, device="cuda")
raise SystemExit("training diverged")
