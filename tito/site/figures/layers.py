"""Module 03 (Layers): its figures, each with its caption and alt text."""

from __future__ import annotations

from .drawing import ACCENT, BLUE, MUTED, Figure, arrow, box, canvas, narrow


def _layers(model):
    """Every layer of the Sequential by position, registered as a child or not."""
    return [(str(i), layer) for i, layer in enumerate(model._layers)]


def _label(name, layer):
    return f"{name}: {type(layer).__name__}"


def _colours(name, model):
    """A registered child in blue; a plain callable (no Module, so no child) in grey."""
    return ("blue", BLUE) if name in model._modules else ("#ffffff", MUTED)


def draw_module_tree(fig):
    from tinytorch import nn

    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    if narrow(fig):
        return _module_tree_narrow(fig, model)
    ax = canvas(fig, (0, 12), (0, 5.4))
    box(ax, 6, 4.6, 3.6, 0.8, "Sequential (the model)", "accent", ACCENT, weight="bold")
    children = _layers(model)
    xs = [2 + 8 * i / max(1, len(children) - 1) for i in range(len(children))]
    for (name, child), x in zip(children, xs):
        arrow(ax, (6, 4.2), (x, 3.55))
        box(ax, x, 3.15, 3.0, 0.75, _label(name, child), *_colours(name, model))
        params = list(getattr(child, "_parameters", {}).items())
        for k, (pname, p) in enumerate(params):
            y = 1.95 - k * 0.95
            if k == 0:
                arrow(ax, (x, 2.78), (x, y + 0.38))
            box(ax, x, y, 3.0, 0.7, f"{name}.{pname}  {tuple(p.shape)}", "ink", MUTED, size=8.5)
        if not params:
            ax.text(
                x,
                2.2,
                "not a Module:\nno child, no parameters",
                ha="center",
                va="center",
                fontsize=8.5,
                color=MUTED,
            )
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


def _module_tree_narrow(fig, model):
    """The phone layout: the children one under the other, their parameters beside them."""
    children = _layers(model)
    rows = max(1, sum(max(1, len(getattr(c, "_parameters", {}))) for _, c in children))
    height = 1.6 + rows * 0.95 + 0.4 * len(children)
    ax = canvas(fig, (0, 8), (0, height))
    top = height - 0.6
    box(ax, 2.2, top, 4.0, 0.8, "Sequential (the model)", "accent", ACCENT, weight="bold")
    y = top - 1.25
    ax.plot(
        [0.45, 0.45],
        [top - 0.4, y - 0.95 * (rows - 1) - 0.4 * (len(children) - 1)],
        color="#1f2328",
        linewidth=1.1,
    )
    for name, child in children:
        params = list(getattr(child, "_parameters", {}).items())
        arrow(ax, (0.45, y), (0.75, y))
        box(ax, 2.15, y, 2.8, 0.72, _label(name, child), *_colours(name, model))
        for k, (pname, p) in enumerate(params):
            py = y - k * 0.95
            arrow(ax, (3.55, y if k == 0 else py + 0.95), (4.25, py))
            box(
                ax, 6.05, py, 3.5, 0.68, f"{name}.{pname}  {tuple(p.shape)}", "ink", MUTED, size=8.5
            )
        if not params:
            ax.text(
                4.3,
                y,
                "not a Module: no child,\nno parameters",
                va="center",
                fontsize=8.5,
                color=MUTED,
            )
        y -= 0.95 * max(1, len(params)) + 0.4


FIGURES = [
    Figure(
        "layers",
        "module-tree",
        "What `Module` records: a tree of children and their named parameters.",
        "A Sequential over Linear 4 to 8, ReLU and Linear 8 to 2: the two Linears are its "
        "children 0 and 2, each with a weight and a bias and their shapes; the ReLU at "
        "position 1 is a plain callable, not a Module, so it is no child and has no parameters.",
        draw_module_tree,
        size=(8.0, 3.4),
        narrow=(4.2, 4.0),
    ),
]
