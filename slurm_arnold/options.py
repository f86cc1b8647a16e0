"""Options every ``arnold`` command spells the same way: one definition each."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def json_option(what: str = "one JSON object") -> Callable[[F], F]:
    """``--json``: machine-readable output on stdout (``as_json``)."""
    return click.option("--json", "as_json", is_flag=True, help=f"Print {what}.")


def quick_option(what: str) -> Callable[[F], F]:
    """``--quick``: a benchmark's smoke run, which writes no docs."""
    return click.option("--quick", is_flag=True, help=f"A smoke run: {what} (no docs).")
