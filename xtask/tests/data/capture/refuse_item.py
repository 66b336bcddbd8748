"""A data-dependent read of CUDA data: `.item()` (GradScaler's step does the same)."""
import torch

x = torch.randn(8, device="cuda")
value = x.sum().item()
print(value)
