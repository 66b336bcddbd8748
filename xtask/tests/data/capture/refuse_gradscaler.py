"""GradScaler's step reads whether the gradients are finite on the host."""
import torch

model = torch.nn.Linear(8, 8).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda")
with torch.autocast("cuda", dtype=torch.float16):
    loss = model(torch.randn(4, 8, device="cuda")).float().sum()
scaler.scale(loss).backward()
scaler.step(opt)
