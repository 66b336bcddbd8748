"""A tiny forward pass: one Linear on a batch, kept to the end; then torch.cuda.empty_cache()."""
import torch


def forward():
    model = torch.nn.Linear(64, 32).cuda()
    x = torch.randn(16, 64, device="cuda")
    return model, x, model(x)


kept = forward()
torch.cuda.empty_cache()
