"""``arnold-prolog``: slurmctld's ``PrologSlurmctld`` (see ``slurm_arnold.prolog``).

It always exits 0: a failing PrologSlurmctld makes slurmctld requeue the job, which is worse
than the job running without our ranks (the SPANK plugin then stops its tasks with one line).
What it did goes to stderr (slurmctld's log at its debug levels) and, when it wrote a rank file,
to the site's ``bindings`` table.
"""

from __future__ import annotations

import logging
import os
import sys

from slurm_arnold.cli.logs import show


def _process_start() -> float | None:
    """When this process started, on ``time.monotonic()``'s clock, so that the prolog's
    recorded time includes Python's start-up (Linux's /proc; None elsewhere)."""
    import time

    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return time.monotonic() - max(0.0, age)


def main() -> None:
    """Entry point of ``arnold-prolog``."""
    level = logging.DEBUG if os.environ.get("ARNOLD_DEBUG") else logging.INFO
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("arnold-prolog: %(levelname)s: %(message)s"))
    show(level, handler)
    log = logging.getLogger("arnold-prolog")
    from site_config import load_config
    from slurm_arnold.errors import ArnoldError
    from slurm_arnold.prolog import prolog

    try:
        outcome = prolog(load_config(), os.environ, started=_process_start())
    except ArnoldError as exc:
        log.warning("%s", exc)
    except Exception as exc:  # never fail the prolog: see the docstring
        from slurm_arnold.cli.errors import unexpected

        log.warning("%s", unexpected(exc))
    else:
        if outcome.kind == "mapped":
            log.info("%s (%.2f s)", outcome.message, outcome.seconds)
        else:
            log.debug("%s", outcome.message)
    sys.exit(0)

