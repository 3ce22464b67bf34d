"""Module 06 (Autograd): its figures, each with its caption and alt text."""

from __future__ import annotations

from .drawing import INK, MUTED, RED, Figure, arrow, box, canvas, narrow


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
    dz = 2 * z.item()
    texts = {
        "w": f"w = {w.item():g}",
        "x": f"x = {x.item():g}",
        "b": f"b = {b.item():g}",
        "u": f"u = w·x = {u.item():g}",
        "z": f"z = u + b = {z.item():g}",
        "L": f"L = z² = {loss.item():g}",
    }
    fills = {"w": "accent", "x": "ink", "b": "accent", "u": "blue", "z": "blue", "L": "green"}
    grads = {
        ("L", "z"): f"dL/dz = 2z = {dz:g}",
        ("z", "u"): f"dL/du = {dz:g}",
        ("z", "b"): f"b.grad = {b.grad.item():g}",
        ("u", "w"): f"w.grad = x · {dz:g} = {w.grad.item():g}",
    }
    forward = [("w", "u"), ("x", "u"), ("u", "z"), ("b", "z"), ("z", "L")]
    if narrow(fig):
        return _graph_narrow(fig, texts, fills, grads, forward)
    ax = canvas(fig, (0, 14), (0, 6.2))
    nodes = {
        "w": (1.5, 4.6),
        "x": (1.5, 2.4),
        "b": (5.6, 1.3),
        "u": (5.6, 3.7),
        "z": (9.1, 2.6),
        "L": (12.4, 2.6),
    }
    for key, (cx, cy) in nodes.items():
        box(ax, cx, cy, 2.2 if key in "wxb" else 2.7, 0.8, texts[key], fills[key])
    for a, c in forward:
        (x0, y0), (x1, y1) = nodes[a], nodes[c]
        arrow(ax, (x0 + (1.1 if a in "wxb" else 1.35), y0 + 0.15), (x1 - 1.35, y1 + 0.15), INK)
    places = {
        ("L", "z"): (10.75, 1.75),
        ("z", "u"): (7.55, 3.75),
        ("z", "b"): (7.3, 1.25),
        ("u", "w"): (0.4, 5.3),
    }
    for (a, c), text in grads.items():
        (x0, y0), (x1, y1) = nodes[a], nodes[c]
        arrow(
            ax, (x0 - 1.35, y0 - 0.2), (x1 + (1.1 if c in "wxb" else 1.35), y1 - 0.2), RED, ls="--"
        )
        tx, ty = places[a, c]
        ax.text(tx, ty, text, color=RED, fontsize=8.5, ha="left", va="center")
    # Two texts, not one with a run of spaces: SVG collapses spaces.
    ax.text(
        0.1,
        5.95,
        "forward: black arrows, each op records its inputs",
        ha="left",
        fontsize=8.5,
        color=MUTED,
    )
    ax.text(
        13.9,
        5.95,
        "backward: red, dashed, in reverse topological order",
        ha="right",
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


def _graph_narrow(fig, texts, fills, grads, forward):
    """The phone layout: the graph from top to bottom, forward arrows on the left of each
    edge, the backward ones (red, dashed) on the right with their gradients."""
    ax = canvas(fig, (0, 8), (0, 9.6))
    nodes = {
        "w": (1.4, 8.7),
        "x": (4.4, 8.7),
        "u": (2.9, 6.6),
        "b": (6.4, 6.6),
        "z": (4.0, 4.2),
        "L": (4.0, 1.8),
    }
    for key, (cx, cy) in nodes.items():
        box(ax, cx, cy, 2.1 if key in "wxb" else 2.9, 0.75, texts[key], fills[key])
    for a, c in forward:
        (x0, y0), (x1, y1) = nodes[a], nodes[c]
        arrow(ax, (x0 - 0.15, y0 - 0.4), (x1 - 0.15, y1 + 0.4), INK)
    places = {
        ("L", "z"): (4.25, 3.0),
        ("z", "u"): (0.1, 5.35),
        ("z", "b"): (5.7, 5.35),
        ("u", "w"): (0.1, 7.65),
    }
    for (a, c), text in grads.items():
        (x0, y0), (x1, y1) = nodes[a], nodes[c]
        arrow(ax, (x0 + 0.2, y0 + 0.4), (x1 + 0.2, y1 - 0.4), RED, ls="--")
        tx, ty = places[a, c]
        short = text.split(" = ")[0] + " = " + text.split(" = ")[-1]  # w.grad = 42: room
        ax.text(tx, ty, short, color=RED, fontsize=8.5, ha="left", va="center")
    ax.text(0.1, 0.75, "forward: black arrows", fontsize=8.5, color=MUTED)
    ax.text(0.1, 0.2, "backward: red, dashed, in reverse order", fontsize=8.5, color=MUTED)


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
        narrow=(4.2, 5.0),
    ),
]
