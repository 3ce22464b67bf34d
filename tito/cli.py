"""`tito`: the command line of the TinyTorch course.

Each verb group lives in its own file under ``tito/commands``; the logic they share lives
in ``tito/course``, ``tito/student``, ``tito/grading`` and ``tito/site`` (map:
``tito/README.md``). Run ``tito --help`` for the map of commands.
"""

import click

from . import __version__
from .commands import dist, export, init, milestone, module, nbgrader, site, system
from .commands.ui import Failure
from .errors import TitoError


class TitoGroup(click.Group):
    """The top command: every ``TitoError`` a command lets through becomes a ``Failure``.

    This is the one place where core errors meet the terminal: the message is printed as
    it is (it already says what to fix), in red, with exit code 2.
    """

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except TitoError as error:
            raise Failure(str(error)) from None


@click.group(cls=TitoGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tito")
def cli():
    """Run the TinyTorch course: modules, exports, milestones and grading."""


for command in (init.init, module.module, export.export, milestone.milestone, system.system,
                nbgrader.nbgrader, site.site, dist.dist):
    cli.add_command(command)


def main():
    cli()
