"""Module 13 (Transformers): its figures, each with its caption and alt text."""

from __future__ import annotations

from .drawing import ACCENT, GREEN, MUTED, Figure, arrow, box, canvas, narrow


def draw_gpt_path(fig):
    from matplotlib.patches import FancyBboxPatch

    from tinytorch import nn

    config = nn.GPTConfig(
        vocab_size=50_257,
        block_size=1024,
        n_layer=12,
        n_head=12,
        n_embd=768,
        bias=True,
        tie_weights=False,
    )
    counts = nn.gpt_parameter_count(config)

    def m(n):
        return f"{n / 1e6:.1f}M"

    if narrow(fig):
        return _gpt_path_narrow(fig, config, counts, m)
    ax = canvas(fig, (0, 16), (0, 7.4))
    y = 5.9
    steps = [
        (1.1, "token ids\n(B, T)", "ink", ""),
        (3.6, "wte[ids]\n(B, T, C)", "blue", m(counts["token_embedding"])),
        (6.3, "+ wpe[0..T)\n(B, T, C)", "blue", m(counts["position_embedding"])),
        (9.3, f"{config.n_layer} blocks\n(B, T, C)", "accent", m(counts["blocks"])),
        (12.0, "ln_f\n(B, T, C)", "ink", ""),
        (14.6, "lm_head\n(B, T, V)", "green", m(counts["lm_head"])),
    ]
    for i, (x, text, fill, params) in enumerate(steps):
        box(ax, x, y, 2.1, 1.05, text, fill, size=9)
        if params:
            ax.text(x, y - 0.82, params, ha="center", fontsize=8.5, color=MUTED)
        if i:
            arrow(ax, (steps[i - 1][0] + 1.05, y), (x - 1.05, y))
    ax.text(15.75, y + 0.75, "logits", fontsize=8.5, ha="right", color=GREEN)
    # one block, expanded
    arrow(ax, (9.3, y - 1.05), (8.0, 3.55), MUTED, ls=":")
    arrow(ax, (9.3, y - 1.05), (10.6, 3.55), MUTED, ls=":")
    ax.add_patch(
        FancyBboxPatch(
            (2.0, 0.45),
            12.0,
            3.0,
            boxstyle="round,pad=0.02,rounding_size=0.15",
            facecolor="#fffaf6",
            edgecolor=ACCENT,
            linewidth=1,
        )
    )
    ax.text(
        2.25,
        3.2,
        f"one block ({m(counts['per_block'])} parameters)",
        fontsize=9,
        color=ACCENT,
        weight="bold",
    )
    row = [
        (3.3, "ln_1"),
        (5.7, "causal self-\nattention"),
        (7.8, "+"),
        (9.4, "ln_2"),
        (11.5, "MLP\nC→4C→C"),
        (13.4, "+"),
    ]
    widths = {"+": 0.6}
    for i, (x, text) in enumerate(row):
        w = widths.get(text, 1.7)
        box(ax, x, 1.9, w, 0.95, text, "blue" if i in (1, 4) else "ink", size=8.5)
        if i:
            px, ptext = row[i - 1]
            arrow(ax, (px + widths.get(ptext, 1.7) / 2, 1.9), (x - w / 2, 1.9))
    for start, end in ((2.35, 7.8), (8.3, 13.4)):  # the residual paths
        ax.plot([start, start, end], [1.9, 2.85, 2.85], color=ACCENT, linewidth=1.1)
        arrow(ax, (end, 2.85), (end, 2.4), ACCENT)
    ax.text(5.1, 2.98, "residual: x + attn(ln_1(x))", fontsize=8, color=ACCENT, ha="center")
    ax.text(10.85, 2.98, "residual: x + mlp(ln_2(x))", fontsize=8, color=ACCENT, ha="center")
    ax.text(
        5.0,
        0.8,
        "tokens exchange information:\nmemory O(T²) per head",
        fontsize=8,
        ha="center",
        color=MUTED,
    )
    ax.text(11.5, 0.8, "each token alone:\ncompute O(T·C²)", fontsize=8, ha="center", color=MUTED)
    ax.text(
        8.0,
        7.15,
        f"GPT-2-sized: V={config.vocab_size:,}, T≤{config.block_size}, "
        f"C={config.n_embd}, {config.n_layer} layers, untied head: "
        f"{counts['total'] / 1e6:.0f}M parameters",
        ha="center",
        fontsize=9,
    )


def _gpt_path_narrow(fig, config, counts, m):
    """The phone layout: the forward path down the left, one block expanded on the right."""
    from matplotlib.patches import FancyBboxPatch

    ax = canvas(fig, (0, 8.4), (0, 13.4))
    steps = [
        ("token ids\n(B, T)", "ink", ""),
        ("wte[ids]\n(B, T, C)", "blue", m(counts["token_embedding"])),
        ("+ wpe[0..T)\n(B, T, C)", "blue", m(counts["position_embedding"])),
        (f"{config.n_layer} blocks\n(B, T, C)", "accent", m(counts["blocks"])),
        ("ln_f\n(B, T, C)", "ink", ""),
        ("lm_head\n(B, T, V)", "green", m(counts["lm_head"])),
    ]
    ys = [12.6 - 1.75 * i for i in range(len(steps))]
    for i, ((text, fill, params), y) in enumerate(zip(steps, ys)):
        box(ax, 1.3, y, 2.4, 1.1, text, fill, size=9)
        if params:
            ax.text(2.6, y + 0.62, params, fontsize=8.5, color=MUTED)
        if i:
            arrow(ax, (1.3, ys[i - 1] - 0.55), (1.3, y + 0.55))
    ax.text(1.3, ys[-1] - 0.95, "logits", fontsize=8.5, ha="center", color=GREEN)
    top, bottom = 12.9, 2.2
    ax.add_patch(
        FancyBboxPatch(
            (3.9, bottom),
            4.4,
            top - bottom,
            boxstyle="round,pad=0.02,rounding_size=0.15",
            facecolor="#fffaf6",
            edgecolor=ACCENT,
            linewidth=1,
        )
    )
    arrow(ax, (2.5, ys[3]), (3.9, ys[3]), MUTED, ls=":")
    ax.text(6.1, top - 0.45, "one block", fontsize=9, color=ACCENT, weight="bold", ha="center")
    ax.text(
        6.1,
        top - 0.85,
        f"{m(counts['per_block'])} parameters",
        fontsize=8.5,
        color=ACCENT,
        ha="center",
    )
    row = [
        ("ln_1", 11.1),
        ("causal self-\nattention", 9.7),
        ("+", 8.45),
        ("ln_2", 7.35),
        ("MLP\nC→4C→C", 6.0),
        ("+", 4.75),
    ]
    heights = {"+": 0.55, "ln_1": 0.7, "ln_2": 0.7}
    for i, (text, y) in enumerate(row):
        h = heights.get(text, 1.0)
        box(
            ax,
            6.1,
            y,
            0.6 if text == "+" else 2.5,
            h,
            text,
            "blue" if i in (1, 4) else "ink",
            size=8.5,
        )
        if i:
            ptext, py = row[i - 1]
            arrow(ax, (6.1, py - heights.get(ptext, 1.0) / 2), (6.1, y + h / 2))
    for x, start, end in ((4.3, 11.6, 8.45), (7.9, 8.0, 4.75)):  # the residual paths
        ax.plot([6.1, x, x], [start, start, end], color=ACCENT, linewidth=1.1)
        arrow(ax, (x, end), (5.8 if x < 6.1 else 6.4, end), ACCENT)
    ax.text(
        6.1,
        3.45,
        "attention: memory O(T²)\nper head; MLP: compute\nO(T·C²)",
        fontsize=8,
        ha="center",
        va="center",
        color=MUTED,
    )
    ax.text(
        4.2,
        1.2,
        f"GPT-2-sized: V={config.vocab_size:,}, T≤{config.block_size},\n"
        f"C={config.n_embd}, {config.n_layer} layers, untied head: "
        f"{counts['total'] / 1e6:.0f}M parameters",
        ha="center",
        va="center",
        fontsize=8.5,
    )


FIGURES = [
    Figure(
        "transformers",
        "gpt-forward",
        "The GPT forward path, from token ids to logits, with the "
        "parameters of each piece for a GPT-2-sized model.",
        "Token ids go through the token embedding, plus the position "
        "embedding, twelve blocks, the final norm and the LM head to "
        "logits; below, one block: layer norm, causal self-attention, "
        "residual add, layer norm, MLP, residual add.",
        draw_gpt_path,
        size=(9.6, 4.45),
        narrow=(4.2, 6.7),
    ),
]
