"""The Slurm backends a bench compares side by side: those the site install can serve here
(``commands`` always; ``pyslurm`` where the install has it, built for this Slurm), each run by
setting ``ARNOLD_SLURM__BACKEND`` for the command measured."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from slurm_arnold.errors import ArnoldError
from slurm_arnold.slurm.choice import BACKENDS

#: The backends a bench can name, in the order results are shown.
NAMED = tuple(b for b in BACKENDS if b != "auto")


def installed(name: str) -> str:
    """The site install's command (what users run: ``make cluster`` makes it, with compiled
    bytecode), else this Python's."""
    from benchmarks.multiuser import site_venv

    try:
        site = site_venv() / "bin" / name
    except ArnoldError:
        site = Path("/nonexistent")
    return str(site if site.exists() else Path(sys.executable).parent / name)


def backend_env(backend: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this environment) with ``backend`` chosen for slurm-arnold."""
    return {**(os.environ if base is None else base), "ARNOLD_SLURM__BACKEND": backend}


def available(asked: Sequence[str] | None = None) -> list[str]:
    """The backends to compare: ``asked`` (each checked: one that cannot serve here is an
    error naming why), else every one the site install can serve on this cluster."""
    arnold = installed("arnold")
    out = []
    for backend in asked or NAMED:
        if backend not in NAMED:
            raise ArnoldError(f"--backends {backend}: use {', '.join(NAMED)}")
        proc = subprocess.run([arnold, "site", "show"], capture_output=True, text=True,
                              env=backend_env(backend), cwd="/")
        served = [line.split("served by", 1)[1].strip() for line in proc.stdout.splitlines()
                  if line.startswith("slurm ") and "served by" in line]
        if proc.returncode == 0 and served and not served[0].startswith("no backend"):
            out.append(backend)
        elif asked:
            why = served[0] if served else (proc.stderr.strip() or "no answer")
            raise ArnoldError(f"--backends {backend}: the site install cannot use it here "
                              f"({why})")
    return out
