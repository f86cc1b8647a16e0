"""What every ``topology.conf`` form shares: logical lines (comments, ``\\`` continuations)
and hostlist values, each error naming its source and line."""

from __future__ import annotations

from collections.abc import Iterable

import hostlist

from slurm_arnold.errors import TopologyError


def logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """Lines with comments removed and ``\\`` continuations joined, with starting line numbers."""
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].rstrip()
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        pending += line
        if pending.strip():
            yield start, pending.strip()
        pending = ""
    if pending.strip():
        yield start, pending.strip()


def expand(expr: str, source: str, line: int | None, key: str) -> list[str]:
    """The names of hostlist ``expr`` (the value of ``key``); ``TopologyError`` if bad or empty."""
    try:
        names: list[str] = hostlist.expand_hostlist(expr)
    except hostlist.BadHostlist as exc:
        raise TopologyError(
            source, line, f"{key}={expr}: bad hostlist expression ({exc})"
        ) from None
    if not names:
        raise TopologyError(source, line, f"{key}= is empty")
    return names
