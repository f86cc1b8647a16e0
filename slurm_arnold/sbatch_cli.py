"""``arnold-sbatch``: sbatch with topology-aware placement.

Until the placement-aware submission lands, a job without any of Arnold's options is handed to
``sbatch`` unchanged, which is also what it will always do for such jobs: same arguments, same
standard input, same output and exit code.
"""

from __future__ import annotations

import os
import shutil
import sys


def main(argv: list[str] | None = None) -> None:
    """Replace this process with the real ``sbatch``, passing every argument through."""
    args = sys.argv[1:] if argv is None else argv
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        print("arnold-sbatch: error: `sbatch` not found; install Slurm's client commands "
              "(Debian: slurm-client) or put them on PATH", file=sys.stderr)
        sys.exit(int(os.environ.get("SLURM_EXIT_ERROR", "1")))
    os.execv(sbatch, [sbatch, *args])
