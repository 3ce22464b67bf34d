"""The PyTorch twin of `tinytorch.models.transformer.GPT`, with every variant of GPTConfig.

Same architecture, same parameter names: pre-norm blocks (LayerNorm with or without bias, or
RMSNorm), a fused qkv projection, causal attention, a GELU (tanh or exact) or SwiGLU MLP,
learned positions, an LM head tied to `wte` or not. `copy_to_torch` / `copy_to_tinytorch` move
the weights by name in either direction; every name must exist in both models.

Attention runs either written out (`attention="math"`: q k^T / sqrt(d), a -inf causal mask,
softmax, @ v; the default, an independent check of the fused kernel) or through PyTorch's
fused `scaled_dot_product_attention` (`attention="sdpa"`: what a speed comparison wants).

Dropout is not modelled: the twin is for deterministic comparisons, so a config with
dropout > 0 is refused.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from tinytorch.models.transformer import GPTConfig, swiglu_hidden

_RESIDUAL_PROJECTIONS = ("attn.proj.weight", "mlp.proj.weight", "mlp.down_proj.weight")


def _config(config):
    """A GPTConfig from a GPTConfig or a dict of its fields (validated the same way)."""
    config = config if isinstance(config, GPTConfig) else GPTConfig(**dict(config))
    if config.dropout:
        raise ValueError(f"the PyTorch twin has no dropout (got dropout={config.dropout}); "
                         "compare the two models with dropout=0.0")
    return config


class TorchRMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight, over the last axis (TinyTorch's eps default)."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class TorchMLP(nn.Module):
    """proj(gelu(fc(x)))."""

    def __init__(self, dim, hidden=None, bias=True, approximate="tanh"):
        super().__init__()
        hidden = 4 * dim if hidden is None else hidden
        self.fc = nn.Linear(dim, hidden, bias=bias)
        self.proj = nn.Linear(hidden, dim, bias=bias)
        self.approximate = approximate

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate=self.approximate))


class TorchSwiGLU(nn.Module):
    """down_proj(silu(gate_proj(x)) * up_proj(x))."""

    def __init__(self, dim, hidden=None, bias=False):
        super().__init__()
        hidden = swiglu_hidden(dim) if hidden is None else hidden
        self.gate_proj = nn.Linear(dim, hidden, bias=bias)
        self.up_proj = nn.Linear(dim, hidden, bias=bias)
        self.down_proj = nn.Linear(hidden, dim, bias=bias)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class TorchAttention(nn.Module):
    """nanoGPT's CausalSelfAttention: fused qkv, causal softmax attention, output projection."""

    def __init__(self, dim, heads, bias=True, attention="math"):
        super().__init__()
        if attention not in ("math", "sdpa"):
            raise ValueError(f"attention must be 'math' or 'sdpa', got {attention!r}")
        self.heads, self.attention = heads, attention
        self.qkv = nn.Linear(dim, 3 * dim, bias=bias)
        self.proj = nn.Linear(dim, dim, bias=bias)

    def forward(self, x):
        B, T, C = x.shape
        H = self.heads
        q, k, v = self.qkv(x).view(B, T, 3, H, C // H).permute(2, 0, 3, 1, 4)  # (B, H, T, D)
        if self.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, D)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)  # (B, H, T, T)
            future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            y = F.softmax(att.masked_fill(future, float("-inf")), dim=-1) @ v  # (B, H, T, D)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))  # (B, T, C)


def torch_norm(config):
    """The norm a GPTConfig asks for, at its width."""
    config = _config(config)
    if config.norm == "rmsnorm":
        return TorchRMSNorm(config.n_embd)
    return nn.LayerNorm(config.n_embd, bias=config.bias)


class TorchBlock(nn.Module):
    """Pre-norm block: x + attn(ln1(x)), then + mlp(ln2(x))."""

    def __init__(self, config, attention="math"):
        super().__init__()
        config = _config(config)
        self.ln1 = torch_norm(config)
        self.attn = TorchAttention(config.n_embd, config.n_head, config.bias, attention)
        self.ln2 = torch_norm(config)
        if config.mlp == "swiglu":
            self.mlp = TorchSwiGLU(config.n_embd, bias=config.bias)
        else:
            self.mlp = TorchMLP(config.n_embd, bias=config.bias,
                                approximate=config.gelu_approximate)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))  # (B, T, C)
        return x + self.mlp(self.ln2(x))  # (B, T, C)


class TorchGPT(nn.Module):
    """GPT in PyTorch, named as TinyTorch's: wte, wpe, blocks.N.*, ln_f, lm_head."""

    def __init__(self, config, attention="math"):
        super().__init__()
        self.config = config = _config(config)
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.blocks = nn.Sequential(*[TorchBlock(config, attention) for _ in range(config.n_layer)])
        self.ln_f = torch_norm(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        if config.tie_weights:
            self.lm_head.weight = self.wte.weight

    def forward(self, idx, targets=None):
        """(logits (B, T, V), mean cross-entropy against targets (B, T), or None)."""
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))  # (B, T, C)
        logits = self.lm_head(self.ln_f(self.blocks(x)))  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss


def init_like_nanogpt_(model, generator=None):
    """nanoGPT's initialization, drawn by PyTorch: N(0, 0.02) matrices, residual projections
    N(0, 0.02 / sqrt(2 * n_layer)), zero biases, norms at one. In place; returns the model."""
    residual_std = 0.02 / math.sqrt(2 * model.config.n_layer)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                std = residual_std if name.endswith(_RESIDUAL_PROJECTIONS) else 0.02
                nn.init.normal_(p, mean=0.0, std=std, generator=generator)
            elif name.endswith(".bias"):
                p.zero_()
    return model


def _named_pairs(ours, theirs):
    """{name: (TinyTorch parameter, torch parameter)}; a clear error when the names differ."""
    ours_named = dict(ours.named_parameters(remove_duplicate=False))
    theirs_named = dict(theirs.named_parameters(remove_duplicate=False))
    if set(ours_named) != set(theirs_named):
        only_ours = sorted(set(ours_named) - set(theirs_named))
        only_theirs = sorted(set(theirs_named) - set(ours_named))
        raise ValueError(f"the two models name their parameters differently: only in TinyTorch "
                         f"{only_ours}, only in PyTorch {only_theirs}; build both from the same "
                         "config")
    pairs = {}
    for name, p in ours_named.items():
        q = theirs_named[name]
        if tuple(p.shape) != tuple(q.shape):
            raise ValueError(f"{name}: TinyTorch {tuple(p.shape)}, PyTorch {tuple(q.shape)}")
        pairs[name] = (p, q)
    return pairs


def copy_to_torch(ours, theirs):
    """Copy a TinyTorch model's weights into its PyTorch twin, by name. Returns `theirs`."""
    with torch.no_grad():
        for p, q in _named_pairs(ours, theirs).values():
            q.copy_(torch.from_numpy(np.ascontiguousarray(p.data)))
    return theirs


def copy_to_tinytorch(theirs, ours):
    """Copy a PyTorch twin's weights into the TinyTorch model, by name (tied weights stay
    tied: the shared array is written in place). Returns `ours`."""
    for p, q in _named_pairs(ours, theirs).values():
        p.data[...] = q.detach().cpu().numpy().astype(p.data.dtype, copy=False)
    return ours


def torch_gpt_from(model, attention="math"):
    """A TorchGPT with the same config and weights as the TinyTorch GPT `model`."""
    return copy_to_torch(model, TorchGPT(model.config, attention))
