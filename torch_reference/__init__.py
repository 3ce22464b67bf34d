"""PyTorch twins of TinyTorch's models, for tests and benchmarks (never imported by tinytorch).

    from torch_reference import TorchGPT, copy_to_torch, copy_to_tinytorch

Each twin uses TinyTorch's parameter names, so weights copy by name in either direction.
"""

from torch_reference.gpt import (
    TorchAttention,
    TorchBlock,
    TorchGPT,
    TorchMLP,
    TorchRMSNorm,
    TorchSwiGLU,
    copy_to_tinytorch,
    copy_to_torch,
    init_like_nanogpt_,
    torch_gpt_from,
    torch_norm,
)

__all__ = [
    "TorchAttention", "TorchBlock", "TorchGPT", "TorchMLP", "TorchRMSNorm", "TorchSwiGLU",
    "copy_to_tinytorch", "copy_to_torch", "init_like_nanogpt_", "torch_gpt_from", "torch_norm",
]
