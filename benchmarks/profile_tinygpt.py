"""Module 14's profiler on the tinygpt milestone's model: the figures the lesson quotes.

Prints, each measured or counted in this run:

1. FLOPs counted from the ops that ran against hand counts, and against PyTorch's
   `torch.utils.flop_counter.FlopCounterMode` (which counts matrix products only): a
   Linear, causal attention, and a whole GPT forward.
2. The training step's counted FLOPs (forward + backward from the recorded graph) against
   6 x params x tokens, and with attention's 12 L T C per token added.
3. Time and FLOP shares of attention against the MLP, over repeated real training steps
   (median self time per layer; the step split into forward, backward, optimizer).
4. Memory against the sequence length: bytes kept for backward and the step's peak
   (tracemalloc), with a fit a + bT + cT^2.

    .venv/bin/python benchmarks/profile_tinygpt.py            # repeat 7
    .venv/bin/python benchmarks/profile_tinygpt.py --quick    # repeat 2, shorter T sweep

Times are wall-clock on whatever else the machine is doing; FLOPs and bytes are exact.
"""

from __future__ import annotations

import argparse

import numpy as np

from tinytorch.core.attention import scaled_dot_product_attention
from tinytorch.core.layers import Linear, Module
from tinytorch.core.optimizers import SGD, AdamW
from tinytorch.core.tensor import Tensor, manual_seed
from tinytorch.models.transformer import GPT, GPTConfig
from tinytorch.perf.profiling import Profiler


def gpt_forward_flops(c, B, T, loss=False):
    """Module 13's GPT forward, op by op, by hand (module 14's FLOP conventions)."""
    C, V, H, L, n = c.n_embd, c.vocab_size, c.n_head, c.n_layer, B * T
    bias = int(c.bias)
    norm = (6 + bias) * n * C

    def linear(k, m):
        return 2 * n * k * m + bias * n * m

    attention = B * H * (4 * T * T * (C // H) + 6 * T * T)
    block = (norm + linear(C, 3 * C) + attention + linear(C, C) + n * C
             + norm + linear(C, 4 * C) + 8 * n * 4 * C + linear(4 * C, C) + n * C)
    return n * C + L * block + norm + 2 * n * C * V + (5 * n * V if loss else 0)


def torch_flops(fn):
    try:
        from torch.utils.flop_counter import FlopCounterMode
    except ImportError:
        return None
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def flop_section(config, B):
    import importlib.util

    has_torch = importlib.util.find_spec("torch") is not None
    T, C, H = config.block_size, config.n_embd, config.n_head
    rng = np.random.default_rng(0)
    print("1. FLOPs: hand count, counted from the ops that ran, PyTorch's FlopCounterMode")
    print(f"   {'what':44s} {'hand':>14s} {'counted':>14s} {'PyTorch':>14s}")

    manual_seed(0)
    layer = Linear(C, 4 * C)
    x = rng.standard_normal((B, T, C)).astype(np.float32)
    counted = Profiler(depth=0, repeat=1).profile_forward_pass(layer, Tensor(x)).flops
    hand = 2 * B * T * C * 4 * C + B * T * 4 * C
    ref = None
    if has_torch:
        import torch

        ref = torch_flops(lambda: torch.nn.Linear(C, 4 * C)(torch.from_numpy(x)))
    print(f"   {f'Linear({C}, {4 * C}) on ({B}, {T}, {C})':44s} {hand:14,} {counted:14,} "
          f"{ref if ref is None else f'{ref:,}':>14} (PyTorch: the product only)")

    q, k, v = (rng.standard_normal((B, H, T, C // H)).astype(np.float32) for _ in range(3))

    class Attend(Module):
        def forward(self, q):
            return scaled_dot_product_attention(q, Tensor(k), Tensor(v), is_causal=True)

    counted = Profiler(depth=0, repeat=1).profile_forward_pass(Attend(), Tensor(q)).flops
    hand = B * H * (4 * T * T * (C // H) + 6 * T * T)
    ref = None
    if has_torch:
        import torch

        tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
        ref = torch_flops(lambda: torch.softmax(tq @ tk.transpose(-1, -2), -1) @ tv)
    print(f"   {f'causal attention ({B}, {H}, {T}, {C // H})':44s} {hand:14,} {counted:14,} "
          f"{ref if ref is None else f'{ref:,}':>14} (PyTorch: the two products only)")

    manual_seed(0)
    model = GPT(config)
    idx = rng.integers(0, config.vocab_size, size=(B, T))
    counted = Profiler(depth=0, repeat=1).profile_forward_pass(model, idx).flops
    hand = gpt_forward_flops(config, B, T)
    print(f"   {'GPT forward, milestone config, no loss':44s} {hand:14,} {counted:14,}")


def step_section(config, B, repeat):
    manual_seed(0)
    model = GPT(config)
    optimizer = AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
    idx = np.random.default_rng(0).integers(0, config.vocab_size, size=(B, config.block_size + 1))
    x, y = idx[:, :-1], idx[:, 1:]
    profile = Profiler(depth=3, repeat=repeat).profile_training_step(model, x, y, optimizer)
    n = model.num_parameters(exclude_embeddings=True)
    tokens = x.size
    counted = profile.flops + profile.backward_flops
    rule = 6 * n * tokens
    attention = 12 * config.n_layer * config.block_size * config.n_embd * tokens
    print("\n2. Training step FLOPs (forward counted, backward from the recorded graph)")
    print(f"   counted {counted:,} = forward {profile.flops:,} + backward "
          f"{profile.backward_flops:,}")
    print(f"   6ND = 6 x {n:,} x {tokens} = {rule:,}: counted / 6ND = {counted / rule:.3f}")
    print(f"   6ND + 12 L T C D = {rule + attention:,}: counted / that = "
          f"{counted / (rule + attention):.3f}")

    def part(row):
        parts = row.name.split(".")
        if parts[0] == "blocks" and len(parts) == 3:
            return parts[2]
        if parts[0] == "blocks" and len(parts) == 2:
            return "residual adds"
        return row.name or "(model)"

    groups = {g.name: g for g in profile.grouped(part)}
    forward = sum(g.time for g in groups.values())
    print(f"\n3. Shares over {repeat} real AdamW steps, batch {B} x {config.block_size} "
          f"(median; step {profile.total_time * 1e3:.1f} ms: "
          + ", ".join(f"{k} {v * 1e3:.1f} ms ({v / profile.total_time:.0%})"
                      for k, v in profile.phases.items()) + ")")
    print(f"   {'part':16s} {'fwd time':>9s} {'fwd FLOPs':>10s} {'step FLOPs':>11s} "
          f"{'GFLOP/s':>8s} {'kept MiB':>9s}")
    for name in ("attn", "mlp", "ln1", "ln2", "residual adds", "lm_head", "ln_f", "(model)", "wte"):
        g = groups[name]
        rate = g.flops / g.time / 1e9 if g.time > 0 else 0.0
        print(f"   {name:16s} {g.time / forward:9.1%} {g.flops / profile.flops:10.1%} "
              f"{(g.flops + g.backward_flops) / counted:11.1%} {rate:8.1f} "
              f"{g.saved_bytes / 2**20:9.2f}")
    worst = max(profile.rows, key=lambda r: r.time)
    print(f"   slowest row: {worst.name} ({worst.kind}), {profile.share(worst):.1%} of the forward")


def memory_section(lengths, B):
    manual_seed(0)
    config = GPTConfig(block_size=max(lengths))
    model = GPT(config)
    rng = np.random.default_rng(0)
    print(f"\n4. Memory against T (milestone widths, batch {B}, one SGD step each)")
    print(f"   {'T':>5s} {'kept for backward':>18s} {'step peak':>11s} {'one (B,H,T,T) f32':>18s}")
    peaks = []
    for t in lengths:
        idx = rng.integers(0, config.vocab_size, size=(B, t + 1))
        step = Profiler(depth=0, repeat=1).profile_training_step(
            model, idx[:, :-1], idx[:, 1:], SGD(model.parameters(), lr=0.0))
        peaks.append(step.peak_bytes)
        print(f"   {t:5d} {step.saved_bytes / 2**20:14.2f} MiB {step.peak_bytes / 2**20:7.2f} MiB "
              f"{B * config.n_head * t * t * 4 / 2**20:14.2f} MiB")
    t = np.asarray(lengths, dtype=np.float64)
    a, b, c = np.linalg.lstsq(np.stack([np.ones_like(t), t, t * t], 1), np.asarray(peaks, float),
                              rcond=None)[0]
    print(f"   fit: peak = {a / 2**20:.2f} MiB + {b / 1024:.1f} KiB x T + {c:.0f} B x T^2 "
          f"= {c / (B * config.n_head * 4):.2f} (B, H, T, T) float32 matrices")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few repeats, short T sweep")
    args = parser.parse_args()
    config = GPTConfig()
    flop_section(config, B=12)
    step_section(config, B=12, repeat=2 if args.quick else 7)
    memory_section((32, 64, 128) if args.quick else (32, 64, 128, 256, 512), B=4)


if __name__ == "__main__":
    main()
