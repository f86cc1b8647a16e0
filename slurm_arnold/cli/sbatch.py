"""``arnold-sbatch``: sbatch with topology-aware placement.

Our options (``--tp``, ``--pp``, ``--dp``, ``--alpha``, ``--align``, ``--placement``,
``--rank-order``) come from the command line or ``#ARNOLD`` lines; everything else goes to the
real ``sbatch`` untouched. A job without any of our options is handed to sbatch unchanged.
stdout is sbatch's, byte for byte; our logs go to stderr; the exit code is sbatch's, or 1
(``SLURM_EXIT_ERROR`` if set) for our own errors.
"""

from __future__ import annotations

import logging
import os
import sys

from site_config import load_config
from slurm_arnold.cli.logs import show
from slurm_arnold.errors import ArnoldError
from slurm_arnold.submit.flow import submit


def _exit_error() -> int:
    """sbatch's own rule: ``SLURM_EXIT_ERROR`` when it is a number, else 1."""
    text = os.environ.get("SLURM_EXIT_ERROR", "").strip()
    return int(text) if text.isdigit() else 1


class _Labels(logging.Formatter):
    """News as a plain line, trouble labelled: ``arnold-sbatch: warning: ...``."""

    def format(self, record: logging.LogRecord) -> str:
        label = "" if record.levelno == logging.INFO else f"{record.levelname.lower()}: "
        return f"arnold-sbatch: {label}{record.getMessage()}"


def setup_logging(args: list[str]) -> None:
    """News (where the job was placed, what ``--model`` planned, why it queues) on stderr
    unless sbatch's own ``-Q``/``--quiet`` is given; ``ARNOLD_DEBUG=1`` for everything."""
    from slurm_arnold.submit.options import split_args

    try:
        quiet = "quiet" in split_args(args).cli
    except ArnoldError:
        quiet = False  # the submission itself reports the bad arguments
    level = (logging.DEBUG if os.environ.get("ARNOLD_DEBUG")
             else logging.WARNING if quiet else logging.INFO)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Labels())
    show(level, handler)
    # Which backend serves Slurm is arnold's -v news, not every submission's.
    logging.getLogger("slurm_arnold.slurm.choice").setLevel(
        logging.DEBUG if level <= logging.DEBUG else logging.WARNING)


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``arnold-sbatch``."""
    args = sys.argv[1:] if argv is None else argv
    setup_logging(args)
    try:
        code = submit(args, load_config())
    except ArnoldError as exc:
        print(f"arnold-sbatch: error: {exc}", file=sys.stderr)
        code = _exit_error()
    except KeyboardInterrupt:
        code = 130
    except Exception as exc:
        from slurm_arnold.cli.errors import unexpected

        print(f"arnold-sbatch: error: {unexpected(exc)}", file=sys.stderr)
        code = _exit_error()
    sys.exit(code)
