"""Module 03 (Layers): its figures, each with its caption and alt text."""

from __future__ import annotations

from .drawing import ACCENT, BLUE, MUTED, Figure, arrow, box, canvas


def draw_module_tree(fig):
    from tinytorch import nn

    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    ax = canvas(fig, (0, 12), (0, 5.4))
    box(ax, 6, 4.6, 3.6, 0.8, "Sequential (the model)", "accent", ACCENT, weight="bold")
    children = list(model._modules.items())
    xs = [2 + 8 * i / max(1, len(children) - 1) for i in range(len(children))]
    for (name, child), x in zip(children, xs):
        arrow(ax, (6, 4.2), (x, 3.55))
        box(ax, x, 3.15, 3.0, 0.75, f"{name}: {type(child).__name__}", "blue", BLUE)
        params = list(child._parameters.items())
        for k, (pname, p) in enumerate(params):
            y = 1.95 - k * 0.95
            if k == 0:
                arrow(ax, (x, 2.78), (x, y + 0.38))
            box(ax, x, y, 3.0, 0.7, f"{name}.{pname}  {tuple(p.shape)}", "ink", MUTED, size=8.5)
        if not params:
            ax.text(x, 2.2, "no parameters", ha="center", fontsize=8.5, color=MUTED)
    total = sum(p.size for p in model.parameters())
    ax.text(
        6,
        0.15,
        f"model.named_parameters() walks this tree: {len(list(model.parameters()))} "
        f"parameters, {total} numbers, each found once",
        ha="center",
        fontsize=8.5,
        color=MUTED,
    )


FIGURES = [
    Figure(
        "layers",
        "module-tree",
        "What `Module` records: a tree of children and their named parameters.",
        "A Sequential with children 0 (Linear 4 to 8), 1 (ReLU) and 2 (Linear "
        "8 to 2), each Linear with a weight and a bias and their shapes.",
        draw_module_tree,
        size=(8.0, 3.4),
    ),
]
