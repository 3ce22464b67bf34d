"""`tito`: the command line of the TinyTorch course.

Each verb group lives in its own file under ``tito/commands``; the logic they share lives
in ``tito/course``, ``tito/student``, ``tito/grading`` and ``tito/site`` (map:
``tito/README.md``). Run ``tito --help`` for the map of commands.

A verb group's file is imported when that verb runs, not before: `tito system doctor` has
no use for the website's or nbgrader's code, and importing every group took half a second.
"""

import importlib

import click

from . import __version__
from .commands.ui import Failure
from .errors import TitoError

# verb -> file under tito/commands holding the click group (or command) of the same name
COMMANDS = {"init": "init", "module": "module", "export": "export", "milestone": "milestone",
            "system": "system", "nbgrader": "nbgrader", "site": "site", "dist": "dist"}


class TitoGroup(click.Group):
    """The top command: every ``TitoError`` a command lets through becomes a ``Failure``.

    This is the one place where core errors meet the terminal: the message is printed as
    it is (it already says what to fix), in red, with exit code 2.
    """

    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        return getattr(importlib.import_module(f"{__package__}.commands.{COMMANDS[name]}"), name)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except TitoError as error:
            raise Failure(str(error)) from None


@click.group(cls=TitoGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tito")
def cli():
    """Run the TinyTorch course: modules, exports, milestones and grading."""


def main():
    cli()
