"""Pieces two command groups share: reading one job log, and a progress bar."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console


def read_log(swf_file: str | None, csv_file: str | None) -> list[Any]:
    """Records and bad lines of the one log given."""
    from predictor.swf import read_csv, read_swf

    if (swf_file is None) == (csv_file is None):
        raise click.UsageError("give exactly one of --swf and --csv")
    return list(read_swf(Path(swf_file)) if swf_file else read_csv(Path(csv_file or "")))


def progress() -> Any:
    """A progress bar on stderr (quiet when stderr is not a terminal)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    return Progress("[progress.description]{task.description}", BarColumn(),
                    MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=True,
                    disable=not sys.stderr.isatty())
