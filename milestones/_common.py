"""What every milestone script shares: arguments, the student's package, data, output, and
the last line.

Milestones run with the student's own `tinytorch` first on the path (`tito milestone run`
arranges that). If a module they need is missing, the package's own placeholder explains
which module to complete; `needs` shows that message instead of a traceback, and
`cannot_load` does the same for a checkpoint folder that does not load. A milestone ends
with `report_verdict`: did it reach its target (exit status 0) or not (1). The exit statuses
are the same in every script: 0 reached, 1 missed, 2 nothing to run (missing modules, a missing or
unreadable checkpoint, bad arguments). The data sets and their splits are in
`tito.course.datasets` (shared with the tests and benchmarks).
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.table import Table

console = Console(highlight=False)


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="a few steps only (used by the tests)")
    p.add_argument("--seed", type=int, default=0, help="random seed (data split, init, order)")
    return p


NOTHING_TO_RUN = 2  # the exit status of a run that could not start


@contextmanager
def needs(what: str = "modules you have not completed"):
    """Imports of the student's package inside this block that fail (a module not completed,
    a name it does not define yet) end the run with status 2 and the import's own message:

        with needs("module 09 (convolutions)"):
            from tinytorch.nn import Conv2d

    No ``tinytorch`` at all means the wrong folder, which it says; a missing dependency
    (NumPy...) is not the student's module to complete, and keeps its traceback.
    """
    try:
        yield
    except ModuleNotFoundError as error:
        if error.name == "tinytorch":
            console.print(f"[red]No tinytorch package can be imported here[/] (you are in "
                          f"{Path.cwd()}). Run milestones inside your workspace, the folder "
                          "`tito init DIR` made: `cd` there, then `tito milestone run NAME`.")
            sys.exit(NOTHING_TO_RUN)
        if not (error.name or "").startswith("tinytorch."):
            raise
        console.print(f"[red]This milestone needs {what}:[/] {error}")
        sys.exit(NOTHING_TO_RUN)
    except (ImportError, AttributeError) as error:
        console.print(f"[red]This milestone needs {what}:[/] {error}")
        sys.exit(NOTHING_TO_RUN)


@contextmanager
def cannot_load(folder, errors=(ValueError, KeyError, OSError, RuntimeError)):
    """A checkpoint folder that fails to load inside this block ends the run with status 2,
    naming the folder and what was wrong (a missing file, a bad config, a shape mismatch)."""
    try:
        yield
    except errors as error:
        console.print(f"[red]Cannot load {folder}:[/] {error}")
        sys.exit(NOTHING_TO_RUN)


def report_verdict(reached: bool, yes: str, no: str) -> int:
    """The milestone's last line: ``yes`` in green when it reached its target, else ``no`` in
    red. Returns the exit status (0 reached, 1 not)."""
    console.print(f"[green]{yes}[/]" if reached else f"[red]{no}[/]")
    return 0 if reached else 1


def report_target(score: float, target: float) -> int:
    """`report_verdict` for a score that must reach ``target`` (a test accuracy, as fractions)."""
    return report_verdict(score >= target, f"Reached the {target:.0%} target.",
                   f"Below the {target:.0%} target.")


def need_tinytorch():
    """Import the student's package, or exit with the message that names the module to do."""
    with needs():
        import tinytorch
        from tinytorch import Tensor  # noqa: F401
        from tinytorch.core import autograd  # noqa: F401  (backward lives there)

    console.print(f"[dim]using tinytorch from {Path(tinytorch.__file__).parent}[/]")
    return tinytorch


class Timer:
    def __enter__(self):
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.start


def curve_table(title: str, rows: list[dict], columns: list[str]) -> Table:
    t = Table(title=title, title_justify="left")
    for c in columns:
        t.add_column(c, justify="right")
    def cell(value) -> str:
        return value if isinstance(value, str) else f"{value:.4f}" if isinstance(value, float) \
            else str(value)

    for r in rows:
        t.add_row(*[cell(r[c]) for c in columns])
    return t


def epoch_rows(history, per_epoch: int) -> list[dict]:
    """One row per epoch of a `train()` history evaluated once an epoch: mean training loss,
    test loss and test accuracy (the rows of `curve_table`)."""
    import numpy as np

    rows = []
    for epoch, ev in enumerate(history.eval, start=1):
        losses = history.loss[(epoch - 1) * per_epoch: epoch * per_epoch]
        rows.append({"epoch": epoch, "train loss": float(np.mean(losses)),
                     "test loss": ev["loss"], "test acc": ev["accuracy"]})
    return rows


def save_plot(path: str, series: dict[str, list[float]], xlabel: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    for label, values in series.items():
        ax.plot(range(1, len(values) + 1), values, label=label, marker="o", markersize=3)
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    console.print(f"saved the training curve to {path}")
