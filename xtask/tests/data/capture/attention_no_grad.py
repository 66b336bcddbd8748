"""Attention under no_grad: cuDNN's kernel (sm_90, bf16) takes no logsumexp then."""
import torch

q = torch.randn(4, 8, 128, 64, device="cuda", dtype=torch.bfloat16)
with torch.no_grad():
    out = torch.nn.functional.scaled_dot_product_attention(q, q, q)
