"""Tables for people: every cell folds onto more lines instead of being cut to "…", so a
piped or narrow terminal (80 columns) still shows whole node lists and paths. Scripts use
``--json``."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table


def table(*columns: str, title: str | None = None) -> Table:
    """A table whose columns fold long values rather than truncate them."""
    out = Table(title=title)
    for name in columns:
        out.add_column(name, overflow="fold")
    return out


def show(rendered: Table) -> None:
    """Print on stdout at the terminal's width (80 when piped, or $COLUMNS)."""
    Console().print(rendered)
