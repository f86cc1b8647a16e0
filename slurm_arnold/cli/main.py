"""The ``arnold`` command: a thin click layer over the library, one module per command group
(``COMMANDS``), each loaded only when invoked.

Exit codes, for every command: 0 success; 1 an error we report (bad input, infeasible request,
Slurm failure) as one line on stderr naming the problem and the fix; 2 a usage error.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from slurm_arnold.cli.errors import unexpected
from slurm_arnold.cli.logs import show
from slurm_arnold.errors import ArnoldError

#: Every command of ``arnold``: its module and the click command in it (``module:name``),
#: imported only when invoked (or listed), as pip's ``commands/__init__.py`` maps names to
#: modules; ``arnold place`` and arnold-sbatch pay the start-up time of nothing else.
COMMANDS = {
    "bench": "slurm_arnold.cli.bench:bench",
    "jobs": "slurm_arnold.cli.jobs:jobs_cmd",
    "pipeline": "slurm_arnold.cli.pipeline:pipeline",
    "place": "slurm_arnold.cli.place:place_cmd",
    "plan": "slurm_arnold.cli.plan:plan",
    "predictor": "slurm_arnold.cli.predictor:predictor",
    "report": "slurm_arnold.cli.report:report",
    "reserve": "slurm_arnold.cli.reserve:reserve",
    "sim": "slurm_arnold.cli.sim:sim_cmd",
    "site": "slurm_arnold.cli.site:site",
    "topology": "slurm_arnold.cli.topology:topology",
}


class ArnoldGroup(click.Group):
    """A click group that turns library errors into one-line messages and exit code 1, and
    loads the commands of ``COMMANDS`` on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command, the lazily loaded ones included."""
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command named ``cmd_name``, importing its module on first use."""
        if cmd_name in COMMANDS and cmd_name not in self.commands:
            import importlib

            module, _, attribute = COMMANDS[cmd_name].partition(":")
            self.add_command(getattr(importlib.import_module(module), attribute), cmd_name)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; report ``ArnoldError`` as ``arnold: error: ...`` and exit 1."""
        try:
            return super().invoke(ctx)
        except ArnoldError as exc:
            click.echo(f"arnold: error: {exc}", err=True)
            ctx.exit(1)
        except (click.exceptions.ClickException, click.exceptions.Exit,
                click.exceptions.Abort, KeyboardInterrupt):
            raise
        except Exception as exc:
            click.echo(f"arnold: error: {unexpected(exc)}", err=True)
            ctx.exit(1)


def setup_logging(verbose: int) -> None:
    """Logs go to stderr: WARNING by default, INFO with -v, DEBUG (every Slurm command) with -vv."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("arnold: %(levelname)s: %(name)s: %(message)s"))
    show(level, handler)


@click.group(cls=ArnoldGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More logging on stderr (-vv: every command).")
@click.version_option(package_name="slurm-arnold")
def main(verbose: int) -> None:
    """Topology-aware placement and scheduling of LLM training jobs on Slurm."""
    setup_logging(verbose)

