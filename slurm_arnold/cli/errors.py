"""The one line every entry point prints for an error it did not foresee (no click here:
``arnold-sbatch`` and ``arnold-prolog`` import this and must start fast)."""

from __future__ import annotations

import logging
import sys


def unexpected(exc: BaseException) -> str:
    """One line for an error we did not foresee: what the system said for a file it could not
    use, else the exception and a request to report it; the traceback with -vv."""
    import traceback

    if logging.getLogger().isEnabledFor(logging.DEBUG):
        traceback.print_exception(exc, file=sys.stderr)
    if type(exc).__name__ == "OperationalError" and "disk is full" in str(exc):
        # A write outside ``StateDB.transaction`` (SQLite rolled it back): not a bug.
        return (f"a state database could not be written ({exc}): its file system is full; "
                "free space there (`df` names it) and run again")
    if isinstance(exc, OSError) and exc.strerror:
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror}"
    return (f"unexpected {type(exc).__name__}: {exc}; this is a bug in arnold: please report "
            "it with the same command's output under -vv")
