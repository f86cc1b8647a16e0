"""Options every ``arnold`` command spells the same way: one definition each."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def json_option(what: str = "one JSON object") -> Callable[[F], F]:
    """``--json``: machine-readable output on stdout (``as_json``)."""
    return click.option("--json", "as_json", is_flag=True, help=f"Print {what}.")


def quick_option(what: str) -> Callable[[F], F]:
    """``--quick``: a benchmark's smoke run, which writes no docs."""
    return click.option("--quick", is_flag=True, help=f"A smoke run: {what} (no docs).")


def topology_option(help_text: str, *, required: bool = False) -> Callable[[F], F]:
    """``--topology FILE``: a topology.conf to read instead of the live cluster's. A path that
    does not exist is a usage error (exit 2) in every command; one that cannot be parsed is
    the command's error (exit 1)."""
    return click.option("--topology", "topology_file",
                        type=click.Path(dir_okay=False, exists=True), required=required,
                        help=help_text)


def minipod_level_option() -> Callable[[F], F]:
    """``--minipod-level``: which switch level forms a minipod; default: the site config's
    ``minipod_level`` (1 unless the site says otherwise), the same in every command."""
    return click.option("--minipod-level", type=click.IntRange(min=0),
                        help="Switch level that forms a minipod (default: the site config's, "
                             "1 unless set).")


class Finite(click.FloatRange):
    """A real number within the range: ``nan`` and ``inf`` are refused (click's ``float`` and
    ``FloatRange`` let them through, and ``nan`` compares false with every bound)."""

    name = "number"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        """The number, or a usage error for one that is not finite."""
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


def sim_settings(ctx: click.Context, param: click.Parameter,
                 values: tuple[str, ...]) -> tuple[tuple[str, Any], ...]:
    """``--set KEY=VALUE`` of ``arnold sim``: each a (field, value) pair read by
    ``slurm_arnold.sim.settings.parse_setting`` (for ``dataclasses.replace`` of its
    SimSettings), or a usage error naming the fix."""
    from slurm_arnold.sim.settings import parse_setting

    pairs = []
    for value in values:
        key, sep, text = value.partition("=")
        if not sep:
            raise click.BadParameter(f"{value!r} is not KEY=VALUE", ctx, param)
        try:
            pairs.append(parse_setting(key.strip(), text.strip()))
        except ValueError as err:
            raise click.BadParameter(str(err), ctx, param) from None
    return tuple(pairs)


def parallelism_options(command: F) -> F:
    """``--cp``, ``--ep`` and ``--nvlink-group``: a job's context and expert parallelism and
    the group that must share an NVLink domain (``placement.Parallelism``)."""
    from slurm_arnold.placement.job import NVLINK_GROUPS

    for option in reversed((
        click.option("--cp", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Context-parallel size (ranks after TP: Megatron-Core's order)."),
        click.option("--ep", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Expert-parallel size (groups of EP consecutive DP replicas)."),
        click.option("--nvlink-group", type=click.Choice(NVLINK_GROUPS), default="tp",
                     show_default=True,
                     help="The ranks that must share one NVLink domain: TP, TP x CP or TP x EP."),
    )):
        command = option(command)
    return command


def _writable_docs(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """Refuse a --docs path that cannot be written before the benchmark runs, not after."""
    import os

    parent = Path(value).parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise click.BadParameter(f"{parent} is not a directory you can write; give a path in "
                                 "one", ctx=ctx, param=param)
    return value


def _default_docs() -> str:
    """The checkout's docs/benchmarks.md wherever the command runs from; from an installed
    copy (no checkout around it), docs/benchmarks.md under the current directory."""
    checkout = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"
    return str(checkout) if checkout.exists() else "docs/benchmarks.md"


#: Every full benchmark writes its section of this file (the quick runs write nothing).
docs_option = click.option(
    "--docs", type=click.Path(dir_okay=False), default=_default_docs,
    show_default="the checkout's docs/benchmarks.md", callback=_writable_docs,
    help="Where the full run writes its section.")


#: ``--against VENV``: another install of slurm-arnold (e.g. a venv of an earlier commit),
#: measured side by side with this one in the same run.
backends_option = click.option(
    "--backends", default=None, metavar="pyslurm,commands",
    callback=lambda _ctx, _param, value: tuple(value.split(",")) if value else None,
    help="The Slurm backends to compare side by side (default: every one the site install "
         "can serve on this cluster).")

against_option = click.option(
    "--against", type=click.Path(file_okay=False, exists=True), default=None,
    help="Also time this other install (a venv with slurm-arnold, e.g. of an earlier commit), "
         "alternating with this one in the same run.")
