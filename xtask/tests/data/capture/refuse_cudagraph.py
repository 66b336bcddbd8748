"""CUDA graph capture: real kernels into a private pool."""
import torch

x = torch.randn(8, device="cuda")
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    y = x * 2
