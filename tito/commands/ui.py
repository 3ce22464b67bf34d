"""Terminal output shared by every command: one rich console, one way to fail."""

from __future__ import annotations

import sys

import click
from rich.console import Console
from rich.table import Table

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


class Failure(click.ClickException):
    """An error the user can fix; printed in red with the fix, exit code 2."""

    exit_code = 2

    def show(self, file=None):  # noqa: ARG002 - click's signature
        err_console.print(f"[bold red]error:[/] {self.message}")


def interactive() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()


def table(*columns: str, title: str | None = None) -> Table:
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for c in columns:
        t.add_column(c)
    return t
