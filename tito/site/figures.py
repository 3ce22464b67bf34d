"""The figures of the module pages: SVG files in site/figures/, drawn here with matplotlib.

Each module may have figures (``FIGURES``, by the module's slug): the picture that explains
it, and plots of what its lesson measures. ``draw_all()`` (``tito site figures``) draws them
again; the SVGs are committed so the site builds without matplotlib. Text stays text in the
SVG (``svg.fonttype: none``) and no date or random id is written, so drawing twice gives
the same bytes on one machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..course.registry import COURSE_ROOT, Module

FIGURES_DIR = COURSE_ROOT / "site" / "figures"


@dataclass(frozen=True)
class Figure:
    module: str  # the module's slug
    name: str
    caption: str
    alt: str
    draw: Callable  # draw(fig) on a matplotlib Figure

    def path_for(self, m: Module) -> str:
        return f"figures/{m.dirname}-{self.name}.svg"


FIGURES: dict[str, list[Figure]] = {}


@dataclass(frozen=True)
class PlacedFigure:
    name: str
    caption: str
    alt: str
    path: str  # relative to the site root


def figures_of(m: Module) -> list[PlacedFigure]:
    return [PlacedFigure(f.name, f.caption, f.alt, f.path_for(m)) for f in FIGURES.get(m.slug, [])]


# ---- drawing ------------------------------------------------------------------------------------
INK, MUTED, ACCENT = "#1f2328", "#6b7280", "#c2410c"
BLUE, GREEN, RED = "#0b5cad", "#15803d", "#b91c1c"
FILL = {
    "ink": "#f3f4f6", "accent": "#fff1e8", "blue": "#eaf2fb", "green": "#eef8ee", "red": "#fdecec"
}


def _style():
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams.update(
        {
            "svg.fonttype": "none",  # text stays text: searchable, small, crisp
            "svg.hashsalt": "tinytorch-site",  # stable ids
            "font.family": "DejaVu Sans",
            "font.size": 10,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.edgecolor": MUTED,
            "axes.titlesize": 11,
        }
    )


def _box(ax, x, y, w, h, text, fill="ink", edge=INK, size=9.5, weight="normal"):
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(
        FancyBboxPatch(
            (x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
            facecolor=FILL.get(fill, fill), edgecolor=edge, linewidth=1.1,
        )
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=size, color=INK, weight=weight)


def _arrow(ax, start, end, color=INK, text="", side=0.0, style="-|>", ls="-"):
    from matplotlib.patches import FancyArrowPatch

    ax.add_patch(
        FancyArrowPatch(
            start, end, arrowstyle=style, mutation_scale=11, color=color, linewidth=1.2,
            linestyle=ls, shrinkA=2, shrinkB=2,
        )
    )
    if text:
        mx, my = (start[0] + end[0]) / 2, (start[1] + end[1]) / 2
        ax.text(mx + side, my, text, fontsize=8.5, color=color, ha="left" if side >= 0 else "right",
                va="center")


def _canvas(fig, xlim, ylim):
    ax = fig.add_axes([0, 0, 1, 1])
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_aspect("equal")
    ax.axis("off")
    return ax


# ---- 01 tensor: broadcasting --------------------------------------------------------------------
def draw_broadcasting(fig):
    import numpy as np
    from matplotlib.patches import Rectangle

    from tinytorch import Tensor

    a = Tensor(np.arange(3, dtype=np.float32).reshape(3, 1) * 10)
    b = Tensor(np.arange(4, dtype=np.float32).reshape(1, 4))
    c = (a + b).data
    ax = _canvas(fig, (0, 15.5), (0, 5.2))

    def grid(x0, values, real_rows, real_cols, title):
        rows, cols = values.shape
        for i in range(rows):
            for j in range(cols):
                real = i < real_rows and j < real_cols
                fill = FILL["blue"] if real else "#ffffff"
                ax.add_patch(Rectangle(
                    (x0 + j, 3.6 - i), 1, 1, facecolor=fill, edgecolor=INK if real else MUTED,
                    linestyle="-" if real else (0, (2, 2)), linewidth=1))
                ax.text(x0 + j + 0.5, 4.1 - i, f"{values[i, j]:g}", ha="center", va="center",
                        fontsize=9, color=INK if real else MUTED)
        ax.text(x0 + cols / 2, 4.95, title, ha="center", fontsize=9.5, color=INK)

    grid(0.3, np.repeat(a.data, 4, axis=1), 3, 1, "a: shape (3, 1)")
    ax.text(4.75, 3.1, "+", fontsize=16, ha="center", va="center")
    grid(5.4, np.repeat(b.data, 3, axis=0), 1, 4, "b: shape (1, 4)")
    ax.text(9.85, 3.1, "=", fontsize=16, ha="center", va="center")
    grid(10.5, c, 3, 4, "a + b: shape (3, 4)")
    ax.text(7.75, 0.45, "Dashed cells are never stored: a size-1 axis is read again for every "
            "index of the other operand.", ha="center", fontsize=8.5, color=MUTED)


# ---- 02 activations -----------------------------------------------------------------------------
def draw_activations(fig):
    import numpy as np

    import tinytorch.nn as nn
    from tinytorch import Tensor

    x = np.linspace(-4, 4, 321, dtype=np.float32)
    ax = fig.add_axes([0.08, 0.14, 0.6, 0.78])
    for name, fn, color in (
        ("ReLU", nn.relu, INK), ("GELU", nn.gelu, ACCENT), ("SiLU", nn.silu, GREEN),
        ("Sigmoid", nn.sigmoid, BLUE), ("Tanh", nn.tanh, "#7c3aed"),
    ):
        ax.plot(x, fn(Tensor(x)).data,
                color=color, label=name, linewidth=1.6)
    ax.axhline(0, color=MUTED, linewidth=0.6)
    ax.axvline(0, color=MUTED, linewidth=0.6)
    ax.set_xlabel("x")
    ax.set_ylabel("f(x)")
    ax.set_ylim(-1.2, 4.1)
    ax.legend(frameon=False, loc="upper left")
    ax.set_title("Your activations, evaluated by tinytorch")
    ax2 = fig.add_axes([0.76, 0.14, 0.22, 0.78])
    big = np.array([-1000, -100, -10, 0, 10, 100, 1000], dtype=np.float32)
    with np.errstate(over="ignore"):
        naive = 1 / (1 + np.exp(-big))
    ax2.axis("off")
    stable = nn.sigmoid(Tensor(big)).data
    ax2.text(0.0, 1.0, "sigmoid in float32", fontsize=9.5, weight="bold", va="top")
    for head, x0 in (("x", 0.0), ("stable", 0.33), ("textbook", 0.68)):
        ax2.text(x0, 0.9, head, fontsize=8, color=MUTED, va="top")
    for i, v in enumerate(big):
        y = 0.8 - i * 0.085
        for text, x0 in ((f"{v:g}", 0.0), (f"{stable[i]:.3g}", 0.33), (f"{naive[i]:.3g}", 0.68)):
            ax2.text(x0, y, text, fontsize=8, va="top")
    ax2.text(0.0, 0.0, "e^1000 overflows to inf\n(NumPy warns); the stable\nform never does.",
             fontsize=8, color=MUTED, va="bottom")


# ---- 03 layers: the module tree -----------------------------------------------------------------
def draw_module_tree(fig):
    import tinytorch.nn as nn

    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    ax = _canvas(fig, (0, 12), (0, 5.4))
    _box(ax, 6, 4.6, 3.6, 0.8, "Sequential (the model)", "accent", ACCENT, weight="bold")
    children = list(model._modules.items())
    xs = [2 + 8 * i / max(1, len(children) - 1) for i in range(len(children))]
    for (name, child), x in zip(children, xs):
        _arrow(ax, (6, 4.2), (x, 3.55))
        _box(ax, x, 3.15, 3.0, 0.75, f"{name}: {type(child).__name__}", "blue", BLUE)
        params = list(child._parameters.items())
        for k, (pname, p) in enumerate(params):
            y = 1.95 - k * 0.95
            if k == 0:
                _arrow(ax, (x, 2.78), (x, y + 0.38))
            _box(ax, x, y, 3.0, 0.7, f"{name}.{pname}  {tuple(p.shape)}", "ink", MUTED, size=8.5)
        if not params:
            ax.text(x, 2.2, "no parameters", ha="center", fontsize=8.5, color=MUTED)
    total = sum(p.size for p in model.parameters())
    ax.text(6, 0.15, f"model.named_parameters() walks this tree: {len(list(model.parameters()))} "
            f"parameters, {total} numbers, each found once", ha="center", fontsize=8.5,
            color=MUTED)


# ---- 04 losses: cross-entropy, naive against stable ---------------------------------------------
def draw_cross_entropy(fig):
    import numpy as np

    import tinytorch.nn as nn
    from tinytorch import Tensor

    scale = np.linspace(0, 120, 241, dtype=np.float32)
    base = np.array([1.0, -0.5, 0.25, -1.0], dtype=np.float32)
    stable, naive = [], []
    for s in scale:
        logits = (base * s)[None, :]
        stable.append(nn.cross_entropy(Tensor(logits), np.array([1])).item())
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            e = np.exp(logits)
            naive.append(float(-np.log(e[0, 1] / e.sum())))
    naive = np.array(naive)
    ax = fig.add_axes([0.1, 0.16, 0.86, 0.74])
    ax.plot(scale, stable, color=BLUE, linewidth=2, label="your cross_entropy (log-sum-exp)")
    ok = np.isfinite(naive)
    ax.plot(scale[ok], naive[ok], color=ACCENT, linestyle="--", linewidth=1.6,
            label="-log(softmax) in float32")
    first_bad = scale[~ok][0] if (~ok).any() else None
    if first_bad is not None:
        ax.axvline(first_bad, color=RED, linewidth=0.8)
        ax.text(first_bad + 1.5, max(stable) * 0.55, f"from scale {first_bad:g}: exp overflows,\n"
                "the textbook loss is inf or nan", color=RED, fontsize=8.5)
    ax.set_xlabel("logit scale s (logits = s · [1, -0.5, 0.25, -1], target class 1)")
    ax.set_ylabel("loss")
    ax.legend(frameon=False, loc="upper left")
    ax.set_title("A wrong, confident prediction: the loss should grow linearly with s")


# ---- 05 dataloader: the order of two epochs -----------------------------------------------------
def draw_epochs(fig):
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.patches import Rectangle

    from tinytorch import Tensor
    from tinytorch.data import DataLoader, TensorDataset

    data = TensorDataset(Tensor(np.arange(12, dtype=np.float32)))
    loader = DataLoader(data, batch_size=4, shuffle=True, seed=7)
    ax = _canvas(fig, (0, 16), (0, 4.6))
    cmap = plt.get_cmap("tab20")
    for row, epoch in enumerate((0, 1)):
        order = loader.order(epoch)
        y = 3.2 - row * 1.6
        ax.text(0.1, y + 0.45, f"epoch {epoch}", fontsize=9.5, va="center")
        for i, idx in enumerate(order):
            x = 1.9 + i * 1.1 + (i // 4) * 0.45
            ax.add_patch(Rectangle(
                (x, y), 1.0, 0.9, facecolor=cmap(int(idx) % 20), edgecolor=INK, linewidth=0.8,
                alpha=0.85))
            ax.text(x + 0.5, y + 0.45, str(int(idx)), ha="center", va="center", fontsize=9)
        for b in range(3):
            x = 1.9 + b * (4 * 1.1 + 0.45)
            ax.text(x + 2.2, y - 0.22, f"batch {b}", ha="center", fontsize=8, color=MUTED)
    ax.text(8, 0.2, "order(epoch) = default_rng([seed, epoch]).permutation(12): the same for "
            "every run, and for a run resumed at any epoch", ha="center", fontsize=8.5,
            color=MUTED)


# ---- 06 autograd: a graph and its backward pass -------------------------------------------------
def draw_autograd_graph(fig):
    import numpy as np

    from tinytorch import Tensor

    w = Tensor(np.float32(2.0), requires_grad=True)
    x = Tensor(np.float32(3.0))
    b = Tensor(np.float32(1.0), requires_grad=True)
    u = w * x
    z = u + b
    loss = z * z
    loss.backward()
    ax = _canvas(fig, (0, 14), (0, 6.2))
    nodes = {
        "w": (1.5, 4.6, f"w = {w.item():g}", "accent"),
        "x": (1.5, 2.4, f"x = {x.item():g}", "ink"),
        "b": (5.6, 1.3, f"b = {b.item():g}", "accent"),
        "u": (5.6, 3.7, f"u = w·x = {u.item():g}", "blue"),
        "z": (9.1, 2.6, f"z = u + b = {z.item():g}", "blue"),
        "L": (12.4, 2.6, f"L = z² = {loss.item():g}", "green"),
    }
    for key, (cx, cy, text, fill) in nodes.items():
        _box(ax, cx, cy, 2.2 if key in "wxb" else 2.7, 0.8, text, fill)
    forward = [("w", "u"), ("x", "u"), ("u", "z"), ("b", "z"), ("z", "L")]
    for a, c in forward:
        (x0, y0, *_), (x1, y1, *_) = nodes[a], nodes[c]
        _arrow(ax, (x0 + (1.1 if a in "wxb" else 1.35), y0 + 0.15),
               (x1 - 1.35, y1 + 0.15), INK)
    dz = 2 * z.item()
    grads = [
        ("L", "z", f"dL/dz = 2z = {dz:g}", (10.75, 1.75)),
        ("z", "u", f"dL/du = {dz:g}", (7.55, 3.75)),
        ("z", "b", f"b.grad = {b.grad.item():g}", (7.3, 1.25)),
        ("u", "w", f"w.grad = x · {dz:g} = {w.grad.item():g}", (0.4, 5.3)),
    ]
    for a, c, text, (tx, ty) in grads:
        (x0, y0, *_), (x1, y1, *_) = nodes[a], nodes[c]
        _arrow(ax, (x0 - 1.35, y0 - 0.2), (x1 + (1.1 if c in "wxb" else 1.35), y1 - 0.2), RED,
               ls="--")
        ax.text(tx, ty, text, color=RED, fontsize=8.5, ha="left", va="center")
    ax.text(7, 5.85, "forward: black arrows, each op records its inputs     "
            "backward: red, dashed, in reverse topological order", ha="center", fontsize=8.5,
            color=MUTED)
    ax.text(7, 0.2, "Values computed by tinytorch: L.backward() leaves w.grad and b.grad; x needs "
            "no gradient and gets none.", ha="center", fontsize=8.5, color=MUTED)


# ---- 07 optimizers: paths on a narrow valley ----------------------------------------------------
def draw_optimizer_paths(fig):
    import numpy as np

    from tinytorch import Tensor
    from tinytorch.optim import SGD, Adam

    def path(make, steps=60):
        p = Tensor(np.array([-4.0, 2.0], dtype=np.float32), requires_grad=True)
        opt = make([p])
        points = [p.data.copy()]
        for _ in range(steps):
            opt.zero_grad()
            loss = (p * p * Tensor(np.array([0.05, 1.0], dtype=np.float32))).sum()
            loss.backward()
            opt.step()
            points.append(p.data.copy())
        return np.array(points)

    ax = fig.add_axes([0.08, 0.14, 0.9, 0.76])
    gx, gy = np.meshgrid(np.linspace(-4.5, 1, 200), np.linspace(-2.5, 2.5, 120))
    ax.contour(gx, gy, 0.05 * gx**2 + gy**2, levels=12, colors="#d1d5db", linewidths=0.7)
    for label, make, color in (
        ("SGD lr=0.9", lambda ps: SGD(ps, lr=0.9), MUTED),
        ("SGD momentum 0.9, lr=0.1", lambda ps: SGD(ps, lr=0.1, momentum=0.9), BLUE),
        ("Adam lr=0.3", lambda ps: Adam(ps, lr=0.3), ACCENT),
    ):
        pts = path(make)
        ax.plot(pts[:, 0], pts[:, 1], marker="o", markersize=2.5, linewidth=1.2, color=color,
                label=label)
    ax.plot([0], [0], marker="*", color=GREEN, markersize=12)
    ax.set_xlabel("w1 (gentle direction)")
    ax.set_ylabel("w2 (steep direction)")
    ax.legend(frameon=False, loc="lower right", fontsize=8.5)
    ax.set_title("60 steps of your optimizers on L = 0.05·w1² + w2² (minimum: the star)")


# ---- 08 training: the learning-rate schedule ----------------------------------------------------
def draw_schedule(fig):
    from tinytorch.core.training import CosineWarmup

    sched = CosineWarmup(1e-3, 1e-4, 100, 2000)
    steps = list(range(0, 2201, 5))
    ax = fig.add_axes([0.11, 0.16, 0.85, 0.74])
    ax.plot(steps, [sched(s) * 1e3 for s in steps], color=ACCENT, linewidth=2)
    ax.axvspan(0, 100, color=FILL["accent"])
    ax.text(110, 0.95, "warm-up:\n100 steps", fontsize=8.5, color=ACCENT, va="top")
    ax.text(1600, 0.55, "cosine decay to min_lr\nat total_steps = 2000", fontsize=8.5,
            color=MUTED)
    ax.set_xlabel("step")
    ax.set_ylabel("learning rate (×10⁻³)")
    ax.set_title("CosineWarmup(max_lr=1e-3, min_lr=1e-4, 100, 2000), evaluated by tinytorch")


# ---- 10 tokenization: tokens per character against vocabulary size ------------------------------
def draw_bpe_compression(fig):
    from tinytorch.text import BPETokenizer, CharTokenizer

    text = (COURSE_ROOT / "milestones" / "data" / "tinyshakespeare.txt").read_text("utf-8")
    train, held = text[:40_000], text[200_000:210_000]
    sizes = [256, 300, 400, 600, 800, 1000]
    ratios = []
    for size in sizes:
        tok = BPETokenizer.train(train, size)
        ratios.append(len(tok.encode(held)) / len(held))
    char = CharTokenizer.train(text)
    ax = fig.add_axes([0.11, 0.16, 0.85, 0.74])
    ax.plot(sizes, ratios, marker="o", color=BLUE, linewidth=1.8, label="byte-level BPE")
    ax.scatter([char.vocab_size], [1.0], color=ACCENT, zorder=3,
               label=f"characters ({char.vocab_size} ids)")
    for s, r in zip(sizes, ratios):
        ax.annotate(f"{r:.2f}", (s, r), textcoords="offset points", xytext=(0, 7), ha="center",
                    fontsize=8)
    ax.set_xlabel("vocabulary size (ids)")
    ax.set_ylabel("tokens per character")
    ax.set_ylim(0, 1.15)
    ax.legend(frameon=False, loc="lower left")
    ax.set_title("Measured on Tiny Shakespeare (trained on 40k characters, tested on 10k others)")


# ---- 11 embeddings: sinusoidal positions --------------------------------------------------------
def draw_sinusoidal(fig):
    import tinytorch.nn as nn

    table = nn.sinusoidal_encoding(64, 64)
    table = getattr(table, "data", table)
    ax = fig.add_axes([0.1, 0.15, 0.78, 0.75])
    image = ax.imshow(table, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, origin="upper")
    ax.set_xlabel("feature (pairs of sin and cos, fast waves on the left)")
    ax.set_ylabel("position")
    ax.set_title("sinusoidal_encoding(64, 64): one row per position, nothing learned")
    fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02)


# ---- 12 attention: weights with the causal mask, and memory against length ----------------------
def draw_attention_matrix(fig):
    import numpy as np

    import tinytorch.nn as nn

    rng = np.random.default_rng(0)
    t = 10
    q = rng.standard_normal((1, 1, t, 16)).astype(np.float32)
    k = rng.standard_normal((1, 1, t, 16)).astype(np.float32)
    weights = nn.attention_weights(q, k, is_causal=True)[0, 0]
    mask = nn.causal_mask(t)
    ax1 = fig.add_axes([0.05, 0.14, 0.38, 0.72])
    ax1.imshow(mask, cmap="Greys", vmin=-0.3, vmax=1.6)
    ax1.set_title("causal_mask(10): True = may attend")
    ax2 = fig.add_axes([0.53, 0.14, 0.42, 0.72])
    image = ax2.imshow(weights, cmap="Oranges", vmin=0, vmax=1)
    ax2.set_title("attention weights: each row sums to 1")
    for ax in (ax1, ax2):
        ax.set_xlabel("key position j")
        ax.set_ylabel("query position i")
        ax.set_xticks(range(0, t, 3))
        ax.set_yticks(range(0, t, 3))
    fig.colorbar(image, ax=ax2, fraction=0.045, pad=0.03)


def draw_attention_memory(fig):
    import tracemalloc

    import numpy as np

    import tinytorch.nn as nn
    from tinytorch import Tensor

    rng = np.random.default_rng(0)
    lengths = [128, 256, 512, 1024, 2048]
    b, h, d = 1, 4, 32
    peaks = []
    for t in lengths:
        q, k, v = (Tensor(rng.standard_normal((b, h, t, d)).astype(np.float32),
                          requires_grad=True) for _ in range(3))
        tracemalloc.start()
        out = nn.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.sum().backward()
        peaks.append(tracemalloc.get_traced_memory()[1] / 2**20)
        tracemalloc.stop()
    table = [b * h * t * t * 4 / 2**20 for t in lengths]
    ax = fig.add_axes([0.11, 0.16, 0.85, 0.74])
    ax.plot(lengths, peaks, marker="o", color=ACCENT, linewidth=1.8,
            label="measured peak, forward + backward (tracemalloc)")
    ax.plot(lengths, table, linestyle="--", color=MUTED, label="one (B, H, T, T) float32 table")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xticks(lengths)
    ax.set_xticklabels([str(t) for t in lengths])
    ticks = [0.25, 1, 4, 16, 64, 256]
    ax.set_yticks(ticks)
    ax.set_yticklabels([f"{t:g}" for t in ticks])
    ax.set_xlabel("sequence length T")
    ax.set_ylabel("MiB")
    ax.legend(frameon=False, loc="upper left")
    ax.set_title(f"Your attention, B={b}, H={h}, head dim {d}: doubling T quadruples the memory")


# ---- 13 transformers: the GPT forward path ------------------------------------------------------
def draw_gpt_path(fig):
    from matplotlib.patches import FancyBboxPatch

    import tinytorch.nn as nn

    config = nn.GPTConfig(vocab_size=50_257, block_size=1024, n_layer=12, n_head=12, n_embd=768,
                          bias=True, tie_weights=False)
    counts = nn.gpt_parameter_count(config)

    def m(n):
        return f"{n / 1e6:.1f}M"

    ax = _canvas(fig, (0, 16), (0, 7.4))
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
        _box(ax, x, y, 2.1, 1.05, text, fill, size=9)
        if params:
            ax.text(x, y - 0.82, params, ha="center", fontsize=8.5, color=MUTED)
        if i:
            _arrow(ax, (steps[i - 1][0] + 1.05, y), (x - 1.05, y))
    ax.text(15.75, y + 0.75, "logits", fontsize=8.5, ha="right", color=GREEN)
    # one block, expanded
    _arrow(ax, (9.3, y - 1.05), (8.0, 3.55), MUTED, ls=":")
    _arrow(ax, (9.3, y - 1.05), (10.6, 3.55), MUTED, ls=":")
    ax.add_patch(FancyBboxPatch(
        (2.0, 0.45), 12.0, 3.0, boxstyle="round,pad=0.02,rounding_size=0.15",
        facecolor="#fffaf6", edgecolor=ACCENT, linewidth=1))
    ax.text(2.25, 3.2, f"one block ({m(counts['per_block'])} parameters)", fontsize=9,
            color=ACCENT, weight="bold")
    row = [(3.3, "ln_1"), (5.7, "causal self-\nattention"), (7.8, "+"), (9.4, "ln_2"),
           (11.5, "MLP\nC→4C→C"), (13.4, "+")]
    widths = {"+": 0.6}
    for i, (x, text) in enumerate(row):
        w = widths.get(text, 1.7)
        _box(ax, x, 1.9, w, 0.95, text, "blue" if i in (1, 4) else "ink", size=8.5)
        if i:
            px, ptext = row[i - 1]
            _arrow(ax, (px + widths.get(ptext, 1.7) / 2, 1.9), (x - w / 2, 1.9))
    for start, end in ((2.35, 7.8), (8.3, 13.4)):  # the residual paths
        ax.plot([start, start, end], [1.9, 2.85, 2.85], color=ACCENT, linewidth=1.1)
        _arrow(ax, (end, 2.85), (end, 2.4), ACCENT)
    ax.text(5.1, 2.98, "residual: x + attn(ln_1(x))", fontsize=8, color=ACCENT, ha="center")
    ax.text(10.85, 2.98, "residual: x + mlp(ln_2(x))", fontsize=8, color=ACCENT, ha="center")
    ax.text(5.0, 0.8, "tokens exchange information:\nmemory O(T²) per head", fontsize=8,
            ha="center", color=MUTED)
    ax.text(11.5, 0.8, "each token alone:\ncompute O(T·C²)", fontsize=8, ha="center",
            color=MUTED)
    ax.text(8.0, 7.15, f"GPT-2-sized: V={config.vocab_size:,}, T≤{config.block_size}, "
            f"C={config.n_embd}, {config.n_layer} layers, untied head: "
            f"{counts['total'] / 1e6:.0f}M parameters", ha="center", fontsize=9)


# ---- 09 convolutions: im2col --------------------------------------------------------------------
def draw_im2col(fig):
    import numpy as np
    from matplotlib.patches import Rectangle

    from tinytorch.core.convolutions import im2col

    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)  # (N, C, H, W)
    cols = im2col(x, (3, 3))  # (N * OH * OW, kh * kw * C) = (4, 9)
    colors = [BLUE, ACCENT, GREEN, RED]
    fills = ["blue", "accent", "green", "red"]
    ax = _canvas(fig, (-0.5, 17.5), (-1.4, 5.6))
    for i in range(4):
        for j in range(4):
            ax.add_patch(Rectangle((j, 3 - i), 1, 1, facecolor="#ffffff", edgecolor=INK,
                                   linewidth=0.8))
            ax.text(j + 0.5, 3.5 - i, f"{x[0, 0, i, j]:g}", ha="center", va="center",
                    fontsize=9)
    for w, (oi, oj) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
        inset = 0.06 + 0.07 * w
        ax.add_patch(Rectangle((oj + inset, 1 - oi + inset), 3 - 2 * inset, 3 - 2 * inset,
                               fill=False, edgecolor=colors[w], linewidth=1.6))
    ax.text(2, 4.5, "x: (1, 1, 4, 4), four 3x3 windows", ha="center", fontsize=9.5)
    _arrow(ax, (4.4, 2), (6.2, 2))
    ax.text(5.3, 2.3, "im2col", ha="center", fontsize=8.5)
    x0, cw = 6.6, 1.1
    for r in range(cols.shape[0]):
        for c in range(cols.shape[1]):
            ax.add_patch(Rectangle((x0 + c * cw, 3 - r), cw, 1, facecolor=FILL[fills[r]],
                                   edgecolor=colors[r], linewidth=0.8))
            ax.text(x0 + (c + 0.5) * cw, 3.5 - r, f"{cols[r, c]:g}", ha="center",
                    va="center", fontsize=9)
    ax.text(x0 + 4.5 * cw, 4.5, f"cols: {cols.shape}, one row per window", ha="center",
            fontsize=9.5)
    ax.text(8.5, -0.8, "Each window, flattened, becomes one row; the convolution is then one "
            "matrix product with the weight flattened in the same (kh, kw, C) order: "
            "(N * OH * OW, O).",
            ha="center", fontsize=8.5, color=MUTED)


# ---- 14 profiling: where a forward pass spends its time and its FLOPs ---------------------------
def draw_profile_shares(fig):
    import numpy as np

    from tinytorch import manual_seed
    from tinytorch.models.transformer import GPT, GPTConfig
    from tinytorch.perf.profiling import Profiler

    def part(row):  # blocks.2.attn -> attn; blocks.2 -> the block's own residual adds
        parts = row.name.split(".")
        if parts[0] == "blocks" and len(parts) == 3:
            return parts[2]
        return "residual adds" if parts[0] == "blocks" and len(parts) == 2 else row.name

    manual_seed(0)
    config = GPTConfig()
    model = GPT(config)
    x = np.random.default_rng(0).integers(0, config.vocab_size, size=(12, config.block_size))
    profile = Profiler(depth=3, repeat=3).profile_forward_pass(model, x)
    groups = [g for g in profile.grouped(part) if g.name][:7][::-1]
    names = [g.name for g in groups]
    time_share = [100 * profile.share(g) for g in groups]
    flop_share = [100 * profile.share(g, "flops") for g in groups]
    ax = fig.add_axes([0.17, 0.16, 0.78, 0.72])
    y = np.arange(len(groups))
    ax.barh(y + 0.2, time_share, height=0.38, color=ACCENT, label="share of the time")
    ax.barh(y - 0.2, flop_share, height=0.38, color=BLUE, label="share of the FLOPs")
    ax.set_yticks(y)
    ax.set_yticklabels(names)
    ax.set_xlabel("% of the forward pass (4 blocks summed by part)")
    ax.legend(frameon=False, loc="lower right")
    ax.set_title(f"Profiler on TinyGPT ({config.n_layer} layers, width {config.n_embd}), "
                 f"input {x.shape}: {profile.flops / 1e9:.2f} GFLOP in "
                 f"{profile.total_time * 1e3:.0f} ms", fontsize=10)


# ---- 15 quantization: the int8 and int4 grids, and their error on a weight matrix --------------
def draw_quant_grid(fig):
    import numpy as np

    from tinytorch.perf.quantization import (
        dequantize_int4, dequantize_int8, quantize_int4, quantize_int8,
    )

    w = np.linspace(-1, 1, 400, dtype=np.float32)[None, :]  # one row, max |w| = 1
    q8, s8, z8 = quantize_int8(w)
    w8 = dequantize_int8(q8, s8, z8)
    p4, s4 = quantize_int4(w, group_size=400)
    w4 = dequantize_int4(p4, s4, group_size=400)
    ax1 = fig.add_axes([0.1, 0.16, 0.37, 0.7])
    ax1.plot(w[0], w[0], color=MUTED, linewidth=0.8, linestyle="--", label="float32")
    ax1.step(w[0], w4[0], where="mid", color=ACCENT, linewidth=1.4,
             label=f"int4: 15 steps of {float(s4.ravel()[0]):.3f}")
    ax1.step(w[0], w8[0], where="mid", color=BLUE, linewidth=1.0,
             label=f"int8: 255 steps of {float(s8):.4f}")
    ax1.set_xlabel("weight w")
    ax1.set_ylabel("dequantized weight")
    ax1.set_title("scale = max|w| / 127 (int8), / 7 (int4)")
    ax1.legend(frameon=False, loc="upper left", fontsize=8.5)

    rng = np.random.default_rng(0)
    m = (rng.standard_normal((256, 256)) * rng.uniform(0.2, 2.0, (256, 1))).astype(np.float32)

    def rel(back):  # relative RMS error of the dequantized matrix
        return float(np.sqrt(np.mean((back - m) ** 2) / np.mean(m**2)))

    errors = {"int8\nper tensor": rel(dequantize_int8(*quantize_int8(m))),
              "int8\nper row": rel(dequantize_int8(*quantize_int8(m, axis=0), axis=0))}
    for g in (128, 32):
        packed, scales = quantize_int4(m, group_size=g)
        errors[f"int4\ngroups of {g}"] = rel(dequantize_int4(packed, scales, group_size=g))
    ax2 = fig.add_axes([0.58, 0.16, 0.4, 0.7])
    x = np.arange(len(errors))
    bars = ax2.bar(x, [100 * e for e in errors.values()], color=[BLUE, BLUE, ACCENT, ACCENT])
    for bar, e in zip(bars, errors.values()):
        ax2.text(bar.get_x() + bar.get_width() / 2, 100 * e, f"{100 * e:.1f}%", ha="center",
                 va="bottom", fontsize=8.5)
    ax2.set_xticks(x)
    ax2.set_xticklabels(list(errors), fontsize=8.5)
    ax2.set_ylabel("relative RMS error, %")
    ax2.set_title("a (256, 256) matrix whose rows differ in scale")


# ---- 16 compression: a magnitude-pruning mask ---------------------------------------------------
def draw_pruning_mask(fig):
    import numpy as np

    from tinytorch import manual_seed
    from tinytorch.core.layers import Linear
    from tinytorch.perf.compression import magnitude_mask

    manual_seed(0)
    w = Linear(24, 12).weight.data  # (out, in) = (12, 24)
    mask = magnitude_mask(w, 0.5)
    threshold = float(np.abs(w)[mask].min())  # the smallest magnitude that survives
    bound = float(np.abs(w).max())
    ax1 = fig.add_axes([0.03, 0.2, 0.3, 0.62])
    ax1.imshow(w, cmap="RdBu_r", vmin=-bound, vmax=bound)
    ax1.set_title(f"Linear(24, 12).weight {w.shape}", fontsize=9.5)
    ax2 = fig.add_axes([0.36, 0.2, 0.3, 0.62])
    ax2.imshow(np.where(mask, w, np.nan), cmap="RdBu_r", vmin=-bound, vmax=bound)
    ax2.set_title(f"magnitude_mask(w, 0.5): {int((~mask).sum())} of {w.size} zeroed",
                  fontsize=9.5)
    for ax in (ax1, ax2):
        ax.set_xticks([])
        ax.set_yticks([])
    ax3 = fig.add_axes([0.73, 0.2, 0.25, 0.62])
    bins = np.linspace(0, bound, 25)
    ax3.hist(np.abs(w)[~mask], bins=bins, color=MUTED, label="pruned")
    ax3.hist(np.abs(w)[mask], bins=bins, color=ACCENT, label="kept")
    ax3.axvline(threshold, color=INK, linewidth=1, linestyle="--")
    ax3.set_xlabel("|w|")
    ax3.set_ylabel("weights")
    ax3.legend(frameon=False, fontsize=8.5)
    ax3.set_title(f"threshold |w| = {threshold:.3f}", fontsize=9.5)


# ---- 18 kv_caching: the dense cache against the paged one --------------------------------------
def draw_kv_layout(fig):
    import numpy as np
    from matplotlib.patches import Rectangle

    from tinytorch.models.llm import TinyKvFullCache, TinyKvPagedCache, TinyKvPagedPool

    lengths, page = [29, 6, 14, 3], 8
    dense = TinyKvFullCache()  # one layer's caches
    paged = TinyKvPagedCache(TinyKvPagedPool(page_size=page))
    for cache in (dense, paged):
        cache.reserve(lengths)
        kv = np.ones((len(lengths), 1, max(lengths), 4), np.float32)
        cache.update(kv, kv)
    S = dense.keys.shape[2]  # slots per row of the dense array
    ax = fig.add_axes([0, 0, 1, 1])  # not _canvas: cells are taller than wide here
    ax.set_xlim(-3.5, 68)
    ax.set_ylim(-1.6, 7.4)
    ax.axis("off")
    w = 0.95
    ax.text(0, 6.7, f"dense: one (B, S = {S}) array, {dense.nbytes()} bytes", fontsize=9.5)
    for b, n in enumerate(dense.lengths):
        y = 5.2 - 1.25 * b
        ax.text(-0.3, y + 0.45, f"row {b}", fontsize=8, ha="right", va="center", color=MUTED)
        for s in range(S):
            used = s < n
            ax.add_patch(Rectangle((s * w, y), w, 0.9, facecolor=FILL["blue"] if used else
                                   "#ffffff", edgecolor=INK if used else MUTED, linewidth=0.5,
                                   linestyle="-" if used else (0, (2, 2))))
    x0 = 34
    ax.text(x0, 6.7, f"paged: pages of {page} slots, {paged.nbytes()} bytes", fontsize=9.5)
    for b, table in enumerate(paged.tables):
        y = 5.2 - 1.25 * b
        n = int(paged.lengths[b])
        for j, pid in enumerate(table):
            for s in range(page):
                used = j * page + s < n
                ax.add_patch(Rectangle((x0 + (j * page + s) * w, y), w, 0.9,
                                       facecolor=FILL["accent"] if used else "#ffffff",
                                       edgecolor=INK if used else MUTED, linewidth=0.5,
                                       linestyle="-" if used else (0, (2, 2))))
            ax.text(x0 + (j * page + page / 2) * w, y + 0.45, f"page {pid}", fontsize=7,
                    ha="center", va="center", color=ACCENT)
    ax.text(32, -0.6, f"Sequences of {lengths} tokens. Dashed slots are allocated but hold no "
            "token:\nthe dense cache pads every row to the longest, the paged one wastes at most "
            "the end of each row's last page.", ha="center", va="center", fontsize=8.5,
            color=MUTED)


FIGURES.update(
    {
        "tensor": [Figure("tensor", "broadcasting",
                          "Broadcasting (3, 1) + (1, 4): values computed by your `Tensor`.",
                          "Three grids: a column of 0, 10, 20 plus a row of 0 to 3 gives a 3 by 4 "
                          "table; stretched cells are dashed, as they are never stored.",
                          draw_broadcasting)],
        "activations": [Figure("activations", "curves",
                               "The activations of this module, and why sigmoid must be written "
                               "stably.",
                               "Curves of ReLU, GELU, SiLU, sigmoid and tanh from -4 to 4, and a "
                               "table of sigmoid at plus and minus 1000 where the textbook form "
                               "overflows.", draw_activations)],
        "layers": [Figure("layers", "module-tree",
                          "What `Module` records: a tree of children and their named parameters.",
                          "A Sequential with children 0 (Linear 4 to 8), 1 (ReLU) and 2 (Linear "
                          "8 to 2), each Linear with a weight and a bias and their shapes.",
                          draw_module_tree)],
        "losses": [Figure("losses", "stable-cross-entropy",
                          "Cross-entropy of one confidently wrong prediction as its logits "
                          "grow: computed stably, and the textbook way in float32.",
                          "A straight rising line for the stable loss; the textbook loss follows "
                          "it and then stops where exp overflows.", draw_cross_entropy)],
        "dataloader": [Figure("dataloader", "epochs",
                              "Twelve examples in batches of four over two epochs: the shuffle "
                              "is fixed by the seed and the epoch.",
                              "Two rows of twelve numbered cells, grouped in three batches; the "
                              "order differs between epoch 0 and epoch 1.", draw_epochs)],
        "autograd": [Figure("autograd", "graph",
                            "A computation graph (forward, black) and its backward pass (red): "
                            "values and gradients computed by tinytorch.",
                            "Nodes w, x, b, u = w times x, z = u + b and L = z squared, with "
                            "forward arrows left to right and dashed backward arrows carrying "
                            "dL/dz, dL/du, b.grad and w.grad.", draw_autograd_graph)],
        "optimizers": [Figure("optimizers", "paths",
                              "SGD, SGD with momentum and Adam on a narrow valley, run with your "
                              "optimizers.",
                              "Three paths on elliptical contours from (-4, 2) toward the minimum "
                              "at the origin: plain SGD zigzags, momentum and Adam move along the "
                              "valley.", draw_optimizer_paths)],
        "training": [Figure("training", "schedule",
                            "The learning-rate schedule of the TinyGPT run: warm-up, then "
                            "cosine decay.",
                            "The learning rate rises linearly for 100 steps, then falls along a "
                            "cosine to a tenth of its peak at step 2000.", draw_schedule)],
        "convolutions": [Figure("convolutions", "im2col",
                                "im2col on a 4 by 4 image with a 3 by 3 kernel: values "
                                "computed by your `im2col`.",
                                "A 4 by 4 grid numbered 0 to 15 with four overlapping 3 by 3 "
                                "windows outlined in four colours, and the 4 by 9 matrix "
                                "im2col makes of it, one coloured row per window.",
                                draw_im2col)],
        "tokenization": [Figure("tokenization", "compression",
                                "Measured: how many tokens a character costs as the BPE "
                                "vocabulary grows (drawn by `tito site figures`).",
                                "Tokens per character fall from 1.0 at 256 byte ids as merges "
                                "are added; the character tokenizer sits at 1.0 with 65 ids.",
                                draw_bpe_compression)],
        "embeddings": [Figure("embeddings", "sinusoidal",
                              "Sinusoidal position encodings: every position gets a distinct "
                              "pattern of waves.",
                              "A 64 by 64 heatmap of positions against features; stripes are "
                              "narrow on the left (fast waves) and wide on the right.",
                              draw_sinusoidal)],
        "attention": [
            Figure("attention", "matrix",
                   "The causal mask and the attention weights it leaves: a lower triangle.",
                   "Two 10 by 10 grids: the mask is a lower triangle of True; the weights are "
                   "zero above the diagonal and each row sums to one.", draw_attention_matrix),
            Figure("attention", "memory",
                   "Measured: peak memory of your attention's forward and backward against "
                   "sequence length (drawn by `tito site figures`).",
                   "A log-log plot: measured peak memory rises fourfold per doubling of the "
                   "sequence length, parallel to the size of one T by T table.",
                   draw_attention_memory),
        ],
        "transformers": [Figure("transformers", "gpt-forward",
                                "The GPT forward path, from token ids to logits, with the "
                                "parameters of each piece for a GPT-2-sized model.",
                                "Token ids go through the token embedding, plus the position "
                                "embedding, twelve blocks, the final norm and the LM head to "
                                "logits; below, one block: layer norm, causal self-attention, "
                                "residual add, layer norm, MLP, residual add.",
                                draw_gpt_path)],
        "profiling": [Figure("profiling", "shares",
                             "Measured: where a TinyGPT forward pass spends its time and its "
                             "FLOPs, by your `Profiler` (drawn by `tito site figures`).",
                             "Paired horizontal bars per part of the model: the MLPs and the "
                             "attention take nearly all of the FLOPs and most of the time; the "
                             "layer norms, the residual adds and the head take a larger share "
                             "of the time than of the FLOPs.", draw_profile_shares)],
        "quantization": [Figure("quantization", "grid",
                                "The int8 and int4 grids of your quantizers, and the error they "
                                "leave on a random weight matrix (computed by "
                                "`tito site figures`).",
                                "Left, staircases of dequantized against original weights from "
                                "-1 to 1: int4 has 15 coarse steps, int8 255 fine ones. Right, "
                                "bars of relative error: int8 per tensor and per row under 2%, "
                                "int4 in groups of 128 and 32 about 10%.", draw_quant_grid)],
        "compression": [Figure("compression", "pruning-mask",
                               "Magnitude pruning of one layer at 50%: the mask your "
                               "`magnitude_mask` computes, and where it cuts.",
                               "Left, a 12 by 24 weight heatmap in red and blue; middle, the same "
                               "weights with the half of smallest magnitude blanked out, "
                               "scattered over the matrix; right, a histogram of |w| split at "
                               "one threshold into pruned (grey) and kept (orange).",
                               draw_pruning_mask)],
        "kv_caching": [Figure("kv_caching", "kv-layout",
                              "The keys and values of four unequal sequences in your dense "
                              "cache and in your paged cache (sizes measured by their "
                              "`nbytes()`).",
                              "Left, four rows of 29 slots each, filled to 29, 6, 14 and 3 "
                              "tokens, the rest dashed and wasted; right, the same rows as "
                              "page tables of 8-slot pages, only the last page of each row "
                              "partly empty.", draw_kv_layout)],
    }
)

# Figure sizes in inches by figure name; the rest are 8 x 3.4.
SIZES = {"matrix": (8.4, 3.6), "memory": (8.0, 4.2), "gpt-forward": (9.6, 4.45),
         "graph": (9.0, 4.0),
         "kv-layout": (10.0, 3.2),
         "im2col": (9.0, 3.6), "grid": (9.0, 3.6),
         "pruning-mask": (9.6, 3.2)}


def draw_all(root: Path = FIGURES_DIR, only: list[str] | None = None) -> list[Path]:
    """Draw every figure (or those of the slugs in ``only``) into ``root``; returns the files."""
    import matplotlib.pyplot as plt

    from ..course.registry import MODULES

    _style()
    root.mkdir(parents=True, exist_ok=True)
    written = []
    for m in MODULES:
        if only and m.slug not in only:
            continue
        for f in FIGURES.get(m.slug, []):
            fig = plt.figure(figsize=SIZES.get(f.name, (8.0, 3.4)))  # inches
            f.draw(fig)
            path = root / Path(f.path_for(m)).name
            fig.savefig(path, format="svg", metadata={"Date": None, "Creator": None})
            plt.close(fig)
            written.append(path)
    return written


# ---- module 19 (appended) --------------------------------------------------------------
def draw_benchmark_pairs(fig):
    """Two functions timed in paired rounds on a machine that drifts and hiccups (a fake
    clock: the figures are computed, not measured), their medians, and the ratio's interval
    from your bootstrap, paired and unpaired."""
    import numpy as np

    from tinytorch.perf.benchmarking import Benchmark, Comparison

    rng = np.random.default_rng(3)
    rounds = 16
    machine = 1 + 0.015 * np.arange(2 * rounds) + rng.lognormal(0, 0.12, 2 * rounds) - 1
    machine = np.repeat(machine[::2], 2)  # each round's slowness is shared by its pair
    state = {"t": 0.0, "i": 0}

    def work(cost):
        def fn():
            state["t"] += cost * machine[state["i"] % machine.size] * rng.lognormal(0, 0.01)
            state["i"] += 1
        return fn

    c = Benchmark(warmup=0, repeats=rounds, clock=lambda: state["t"]).compare(
        work(0.010), work(0.009), names=("A", "B"))
    unpaired = Comparison.from_samples(c.baseline.samples, c.candidate.samples)
    ax = fig.add_axes([0.08, 0.16, 0.58, 0.72])
    x = np.arange(rounds)
    for m, dx, colour, label in ((c.baseline, -0.12, BLUE, "A (baseline)"),
                                 (c.candidate, 0.12, ACCENT, "B (candidate)")):
        ms = np.asarray(m.samples) * 1e3
        ax.plot(x + dx, ms, "o", color=colour, ms=4.5, label=f"{label}: {m}")
        ax.axhline(m.median * 1e3, color=colour, linestyle="--", linewidth=1)
    for r in x:
        ax.plot([r - 0.12, r + 0.12], [c.baseline.samples[r] * 1e3, c.candidate.samples[r] * 1e3],
                color=MUTED, linewidth=0.7)
    ax.set_xlabel("round (A B, B A, A B, ...)")
    ax.set_ylabel("ms per call")
    ax.set_title("paired rounds on a machine that slows down and hiccups")
    ax.legend(frameon=False, fontsize=8, loc="upper left")
    ax2 = fig.add_axes([0.76, 0.16, 0.22, 0.72])
    for i, (cmp, label) in enumerate(((c, "paired"), (unpaired, "unpaired"))):
        ax2.errorbar([i], [cmp.ratio], yerr=[[cmp.ratio - cmp.ci[0]], [cmp.ci[1] - cmp.ratio]],
                     fmt="o", color=INK, capsize=6)
        ax2.text(i, cmp.ci[1] + 0.01, cmp.verdict.replace(" (", "\n("), ha="center",
                 va="bottom", fontsize=7.5, color=MUTED)
    ax2.axhline(1.0, color=MUTED, linewidth=1)
    ax2.set_xticks([0, 1], ["paired", "unpaired"])
    ax2.set_xlim(-0.6, 1.6)
    ax2.set_ylim(min(unpaired.ci[0], c.ci[0]) - 0.05, max(1.0, unpaired.ci[1]) + 0.12)
    ax2.set_ylabel("B / A time, 95% interval")


FIGURES["benchmarking"] = [
    Figure("benchmarking", "paired-rounds",
           "Sixteen paired rounds of two functions on a drifting machine (a fake clock, so "
           "the figure is the same every time), and the interval your `bootstrap_ratio_ci` "
           "puts on their ratio, paired and unpaired.",
           "Left, two rows of dots between about 8 and 17 ms that wander up across 16 "
           "rounds, each pair joined by a short line, the candidate's dot always below its "
           "baseline's; dashed lines at each median. Right, two error bars of the ratio "
           "near 0.9: the paired one narrow and wholly below 1 (faster), the unpaired one "
           "wide and crossing 1 (no difference).", draw_benchmark_pairs)]
SIZES["paired-rounds"] = (9.6, 3.6)


# ---- 20 capstone: what the cache and the int8 weights change ----------------------------------
def draw_capstone_events(fig):
    import numpy as np

    from tinytorch.capstone import quantize_weights, weight_nbytes
    from tinytorch.models.llm import Config, ModelForCausalLM, WeightStore, generate

    C, L, V, P = 128, 4, 65, 64  # the tinygpt milestone's shape
    config = Config.from_dict(dict(model_type="gpt2", vocab_size=V, n_embd=C, n_layer=L,
                                   n_head=4, n_positions=P), "figure")

    def model():
        rng = np.random.default_rng(0)
        shapes = {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (P, C),
                  "transformer.ln_f.weight": (C,), "transformer.ln_f.bias": (C,)}
        for i in range(L):
            p = f"transformer.h.{i}"
            for n in ("ln_1", "ln_2"):
                shapes[f"{p}.{n}.weight"] = shapes[f"{p}.{n}.bias"] = (C,)
            for n, s in (("attn.c_attn", (C, 3 * C)), ("attn.c_proj", (C, C)),
                         ("mlp.c_fc", (C, 4 * C)), ("mlp.c_proj", (4 * C, C))):
                shapes[f"{p}.{n}.weight"], shapes[f"{p}.{n}.bias"] = s, s[1:]
        tensors = {k: (0.02 * rng.standard_normal(s)).astype(np.float32)
                   for k, s in shapes.items()}
        return ModelForCausalLM(config, WeightStore(tensors, "figure"))

    class Counting:  # the engine, counting the positions each call processes
        def __init__(self, inner):
            self.inner, self.config, self.calls = inner, inner.config, []

        def create_kv_cache(self, *args, **kwargs):
            return self.inner.create_kv_cache(*args, **kwargs)

        def __call__(self, ids, **kwargs):
            self.calls.append(np.asarray(ids).shape[-1])
            return self.inner(ids, **kwargs)

    prompt, new = list(range(6)), 56
    work = {}
    for cache in (None, "dense"):
        counting = Counting(model())
        generate(counting, prompt, new, temperature=0.0, cache=cache)
        work[cache] = counting.calls
    ax1 = fig.add_axes([0.08, 0.17, 0.4, 0.68])
    steps = np.arange(1, new + 1)
    ax1.bar(steps, work[None], color=FILL["red"], edgecolor=RED, linewidth=0.4,
            label=f"no cache: {sum(work[None]):,} positions in all")
    ax1.bar(steps, work["dense"], color=BLUE, width=0.5,
            label=f"KV cache: {sum(work['dense']):,} positions in all")
    ax1.set_xlabel("decoding step (6-token prompt, 56 new tokens)")
    ax1.set_ylabel("positions run through the model")
    ax1.set_title("decode work per step")
    ax1.legend(frameon=False, loc="upper left", fontsize=8.5)

    rows = []
    for label, bits in (("float32", None), ("int8\nper channel", 8), ("int4\ngroup 32", 4)):
        m = model()
        if bits:
            quantize_weights(m, bits=bits, group_size=32)
        blocks = 0
        for block in m.layers:
            for layer in (block.self_attn.qkv, block.self_attn.proj, block.mlp.fc,
                          block.mlp.proj):
                w = layer.weight  # a Parameter (float32) or a QuantizedWeight
                blocks += w.data.nbytes if bits is None else (w.qweight.nbytes
                                                               + w.scale.nbytes)
        rows.append((label, weight_nbytes(m), blocks))
    ax2 = fig.add_axes([0.6, 0.17, 0.38, 0.68])
    x = np.arange(len(rows))
    mib = 2 ** 20
    ax2.bar(x, [b / mib for _, _, b in rows], color=ACCENT, label="block weights (+ scales)")
    ax2.bar(x, [(t - b) / mib for _, t, b in rows], bottom=[b / mib for _, _, b in rows],
            color=FILL["ink"], edgecolor=MUTED, linewidth=0.6,
            label="embeddings, norms, biases (float32)")
    for i, (_, total, _) in enumerate(rows):
        ax2.text(i, total / mib, f"{total / mib:.2f} MiB\n{rows[0][1] / total:.2f}x smaller"
                 if i else f"{total / mib:.2f} MiB", ha="center", va="bottom", fontsize=8.5)
    ax2.set_xticks(x)
    ax2.set_xticklabels([r[0] for r in rows], fontsize=8.5)
    ax2.set_ylabel("bytes held, MiB (weight_nbytes)")
    ax2.set_ylim(0, rows[0][1] / mib * 1.3)
    ax2.set_title("the TinyGPT's arrays, by format")
    ax2.legend(frameon=False, loc="upper right", fontsize=8)


FIGURES["capstone"] = [Figure(
    "capstone", "events",
    "What the optimized TinyGPT changes: the positions each decoding step runs through the "
    "model without and with the KV cache (counted around module 18's `generate`), and the "
    "bytes your `weight_nbytes` counts in each weight format.",
    "Left, bars rising from 6 to 61 positions per step without the cache, 1,876 in all, "
    "against a first bar of 6 and then bars of 1 with the cache, 61 in all; right, stacked "
    "bars of bytes held: float32 3.09 MiB, int8 0.86 MiB, int4 group 32 0.56 MiB, the "
    "float32 embeddings and norms a small constant part of each.",
    draw_capstone_events)]
SIZES["events"] = (9.6, 3.6)


# ---- 17 acceleration: attention that keeps its probabilities against one that recomputes ------
def draw_attention_keep(fig):
    import numpy as np

    from tinytorch import Tensor
    from tinytorch.core.attention import scaled_dot_product_attention
    from tinytorch.core.tensor import best_time
    from tinytorch.perf.acceleration import fast_kernels

    B, H, D = 4, 4, 32
    lengths = [16, 32, 64, 128, 256]
    rows = {False: ([], []), True: ([], [])}  # on -> (ms, MiB kept)
    for T in lengths:
        rng = np.random.default_rng(T)
        q, k, v = (Tensor(rng.standard_normal((B, H, T, D)).astype(np.float32),
                          requires_grad=True) for _ in range(3))
        grad = Tensor(rng.standard_normal((B, H, T, D)).astype(np.float32))
        for on in (False, True):
            with fast_kernels(on):
                ctx = scaled_dot_product_attention(q, k, v, is_causal=True)._ctx
                kept = list(ctx.inputs) + [ctx.output, ctx.params["keep"]] + list(ctx.saved or ())
                nbytes = sum(a.nbytes for a in {id(a): a for a in kept}.values())

                def step():
                    (scaled_dot_product_attention(q, k, v, is_causal=True) * grad).sum().backward()

                rows[on][0].append(best_time(step, repeat=5) * 1e3)
                rows[on][1].append(nbytes / 2**20)
    labels = {False: "recompute P (module 12)", True: "keep P (module 17)"}
    colors = {False: BLUE, True: ACCENT}
    for i, (title, ylabel) in enumerate((("forward + backward time (log scale)", "ms"),
                                         ("bytes the record keeps for backward", "MiB"))):
        ax = fig.add_axes([0.08 + 0.5 * i, 0.16, 0.39, 0.64])
        for on in (False, True):
            ax.plot(lengths, rows[on][i], marker="o", color=colors[on], label=labels[on])
        ax.set_xscale("log", base=2)
        if i == 0:
            ax.set_yscale("log")
        ax.set_xticks(lengths)
        ax.set_xticklabels([str(t) for t in lengths])
        ax.set_xlabel("context length T")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        if i == 0:
            ax.legend(frameon=False, loc="upper left")
    fig.suptitle(f"Causal attention, batch {B}, {H} heads of {D}: measured by `tito site figures`",
                 fontsize=10, y=0.99)


FIGURES.update(
    {
        "acceleration": [Figure("acceleration", "attention-keep",
                                "Keeping the attention probabilities for backward against "
                                "recomputing them: time and bytes against the context length, "
                                "measured on the machine that drew the figure.",
                                "Left, two rising lines of forward-plus-backward milliseconds "
                                "against T from 16 to 256, the keeping kernel below the "
                                "recomputing one; right, the bytes each record keeps: the "
                                "recomputing one grows linearly with T, the keeping one "
                                "quadratically, pulling away at long contexts.",
                                draw_attention_keep)],
    }
)
SIZES["attention-keep"] = (9.6, 3.4)
