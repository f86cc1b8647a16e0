"""Small files the product writes for others to read (rank and host files, job specs): whole
or not at all, and a full disk said plainly."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from slurm_arnold.errors import StateError


def write_atomically(path: Path, text: str, mode: int = 0o644) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed into place, so a reader
    never sees half of it; ``StateError`` naming the file when it cannot be written (the
    temporary file removed: a full disk keeps nothing of ours)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        tmp.write_text(text)
        os.chmod(tmp, mode)
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        fix = ("the file system is full; free space there (`df` names it) and run again"
               if exc.errno == errno.ENOSPC else exc.strerror)
        raise StateError(f"{path}: cannot write it: {fix}") from None
