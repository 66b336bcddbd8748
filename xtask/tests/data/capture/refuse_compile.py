"""torch.compile: Inductor generates and runs real kernels."""
import torch

model = torch.nn.Linear(8, 8).cuda()
step = torch.compile(model)
out = step(torch.randn(4, 8, device="cuda"))
