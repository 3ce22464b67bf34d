"""Module 06 (Autograd): its figures, each with its caption and alt text."""

from __future__ import annotations

from .drawing import INK, MUTED, RED, Figure, arrow, box, canvas


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
    ax = canvas(fig, (0, 14), (0, 6.2))
    nodes = {
        "w": (1.5, 4.6, f"w = {w.item():g}", "accent"),
        "x": (1.5, 2.4, f"x = {x.item():g}", "ink"),
        "b": (5.6, 1.3, f"b = {b.item():g}", "accent"),
        "u": (5.6, 3.7, f"u = w·x = {u.item():g}", "blue"),
        "z": (9.1, 2.6, f"z = u + b = {z.item():g}", "blue"),
        "L": (12.4, 2.6, f"L = z² = {loss.item():g}", "green"),
    }
    for key, (cx, cy, text, fill) in nodes.items():
        box(ax, cx, cy, 2.2 if key in "wxb" else 2.7, 0.8, text, fill)
    forward = [("w", "u"), ("x", "u"), ("u", "z"), ("b", "z"), ("z", "L")]
    for a, c in forward:
        (x0, y0, *_), (x1, y1, *_) = nodes[a], nodes[c]
        arrow(ax, (x0 + (1.1 if a in "wxb" else 1.35), y0 + 0.15), (x1 - 1.35, y1 + 0.15), INK)
    dz = 2 * z.item()
    grads = [
        ("L", "z", f"dL/dz = 2z = {dz:g}", (10.75, 1.75)),
        ("z", "u", f"dL/du = {dz:g}", (7.55, 3.75)),
        ("z", "b", f"b.grad = {b.grad.item():g}", (7.3, 1.25)),
        ("u", "w", f"w.grad = x · {dz:g} = {w.grad.item():g}", (0.4, 5.3)),
    ]
    for a, c, text, (tx, ty) in grads:
        (x0, y0, *_), (x1, y1, *_) = nodes[a], nodes[c]
        arrow(
            ax, (x0 - 1.35, y0 - 0.2), (x1 + (1.1 if c in "wxb" else 1.35), y1 - 0.2), RED, ls="--"
        )
        ax.text(tx, ty, text, color=RED, fontsize=8.5, ha="left", va="center")
    ax.text(
        7,
        5.85,
        "forward: black arrows, each op records its inputs     "
        "backward: red, dashed, in reverse topological order",
        ha="center",
        fontsize=8.5,
        color=MUTED,
    )
    ax.text(
        7,
        0.2,
        "Values computed by tinytorch: L.backward() leaves w.grad and b.grad; x needs "
        "no gradient and gets none.",
        ha="center",
        fontsize=8.5,
        color=MUTED,
    )


FIGURES = [
    Figure(
        "autograd",
        "graph",
        "A computation graph (forward, black) and its backward pass (red): "
        "values and gradients computed by tinytorch.",
        "Nodes w, x, b, u = w times x, z = u + b and L = z squared, with "
        "forward arrows left to right and dashed backward arrows carrying "
        "dL/dz, dL/du, b.grad and w.grad.",
        draw_autograd_graph,
        size=(9.0, 4.0),
    ),
]
