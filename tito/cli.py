"""`tito`: the command line of the TinyTorch course.

Each verb group lives in its own file under ``tito/commands``; the logic they share lives
in ``tito/course``, ``tito/student``, ``tito/grading`` and ``tito/site`` (map: ``tito/README.md``). Run ``tito --help`` for the map.
"""

import click

from . import __version__
from .commands import dist, export, init, milestone, module, system
from .commands import nbgrader
from .commands import site


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tito")
def cli():
    """Run the TinyTorch course: modules, exports, milestones and grading."""


cli.add_command(init.init)
cli.add_command(module.module)
cli.add_command(export.export)
cli.add_command(milestone.milestone)
cli.add_command(system.system)
cli.add_command(nbgrader.nbgrader)
cli.add_command(site.site)
cli.add_command(dist.dist)


def main():
    cli()
