"""Which log records an entry point shows: ours from the level asked for, everyone else's
(matplotlib, PIL, ...) only from WARNING up unless everything is asked for (DEBUG). A fresh
machine's "generated new fontManager" is matplotlib's news, not the user's."""

from __future__ import annotations

import logging

#: The loggers of slurm-arnold's own packages (``logging.getLogger(__name__)``) and entry points.
OURS = frozenset({"slurm_arnold", "reservations", "predictor", "site_config", "benchmarks",
                  "arnold", "arnold-prolog"})


def show(level: int, handler: logging.Handler) -> None:
    """Log to ``handler`` from ``level`` (as ``logging.basicConfig``: nothing changes where
    the root logger has a handler already), others' records only from WARNING up unless
    ``level`` is DEBUG."""
    if level > logging.DEBUG:
        handler.addFilter(lambda record: record.levelno >= logging.WARNING
                          or record.name.split(".")[0] in OURS)
    logging.basicConfig(level=level, handlers=[handler])
