"""Module 14 (Profiling): its figures, each with its caption and alt text."""

from __future__ import annotations

from functools import cache

from .drawing import ACCENT, BLUE, Figure, panels


@cache
def _profile():
    """The profile, taken once per drawing (the wide and the phone layout show the same)."""
    import numpy as np

    from tinytorch import manual_seed
    from tinytorch.models.transformer import GPT, GPTConfig
    from tinytorch.perf.profiling import Profiler

    manual_seed(0)
    config = GPTConfig()
    model = GPT(config)
    x = np.random.default_rng(0).integers(0, config.vocab_size, size=(12, config.block_size))
    return config, x, Profiler(depth=3, repeat=3).profile_forward_pass(model, x)


def draw_profile_shares(fig):
    import numpy as np

    def part(row):  # blocks.2.attn -> attn; blocks.2 -> the block's own residual adds
        parts = row.name.split(".")
        if parts[0] == "blocks" and len(parts) == 3:
            return parts[2]
        return "residual adds" if parts[0] == "blocks" and len(parts) == 2 else row.name

    config, x, profile = _profile()
    groups = [g for g in profile.grouped(part) if g.name][:7][::-1]
    names = [g.name for g in groups]
    time_share = [100 * profile.share(g) for g in groups]
    flop_share = [100 * profile.share(g, "flops") for g in groups]
    (ax,) = panels(fig, [[0.17, 0.16, 0.78, 0.72]], left=0.33)
    y = np.arange(len(groups))
    ax.barh(y + 0.2, time_share, height=0.38, color=ACCENT, label="share of the time")
    ax.barh(y - 0.2, flop_share, height=0.38, color=BLUE, label="share of the FLOPs")
    ax.set_yticks(y)
    ax.set_yticklabels(names)
    ax.set_xlabel("% of the forward pass (4 blocks summed by part)")
    ax.legend(frameon=False, loc="lower right")
    ax.set_title(
        f"Profiler on TinyGPT ({config.n_layer} layers, width {config.n_embd}), "
        f"input {x.shape}: {profile.flops / 1e9:.2f} GFLOP in "
        f"{profile.total_time * 1e3:.0f} ms",
        fontsize=10,
    )


FIGURES = [
    Figure(
        "profiling",
        "shares",
        "Measured: where a TinyGPT forward pass spends its time and its "
        "FLOPs, by your `Profiler` (drawn by `tito site figures`).",
        "Paired horizontal bars per part of the model: the MLPs and the "
        "attention take nearly all of the FLOPs and most of the time; the "
        "layer norms, the residual adds and the head take a larger share "
        "of the time than of the FLOPs.",
        draw_profile_shares,
        size=(8.0, 3.4),
        narrow=(4.2, 4.4),
    ),
]
