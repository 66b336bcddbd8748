"""nonzero: its output's shape depends on the data."""
import torch

x = torch.randn(8, device="cuda")
idx = torch.nonzero(x > 0)
