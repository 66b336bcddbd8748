"""A custom operator with a kernel but no fake implementation (an extension's op)."""
import torch


@torch.library.custom_op("vramlab_test::scale", mutates_args=())
def scale(x: torch.Tensor) -> torch.Tensor:
    return x * 2


x = torch.randn(8, device="cuda")
y = scale(x)
