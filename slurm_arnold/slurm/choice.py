"""Which backend serves the adapter's reads and reservation writes (``slurm.backend``):
pyslurm where it is installed and built for the running Slurm's release, Slurm's commands
otherwise. pyslurm links one release's libslurm, which reads the cluster's slurm.conf in
process, so it is imported only after its version was checked against ``sinfo --version``."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging

from slurm_arnold.errors import ArnoldError
from slurm_arnold.slurm.backend import SlurmBackend
from slurm_arnold.slurm.commands import CommandsBackend
from slurm_arnold.slurm.runner import Runner

log = logging.getLogger(__name__)

#: The values of the site setting ``slurm.backend``.
BACKENDS = ("auto", "pyslurm", "commands")


def pyslurm_problem(runner: Runner) -> str | None:
    """Why pyslurm cannot serve this Slurm (not installed, or built for another release), or
    None when it can."""
    if importlib.util.find_spec("pyslurm") is None:
        return "pyslurm is not installed"
    version = importlib.metadata.version("pyslurm")
    release = tuple(int(x) for x in version.split(".")[:2] if x.isdigit())
    running = runner.version()
    if release != running:
        return (f"pyslurm {version} is for Slurm {'.'.join(map(str, release))}, this cluster "
                f"runs {running[0]}.{running[1]:02d}")
    return None


def choose_backend(runner: Runner, setting: str) -> SlurmBackend:
    """The backend ``setting`` asks for: ``commands``; ``pyslurm`` (an error naming why not
    where it cannot serve); ``auto``, pyslurm where it can serve, else the commands with one
    info line saying why."""
    if setting not in BACKENDS:
        raise ArnoldError(f"slurm.backend = {setting!r}: use one of {', '.join(BACKENDS)}")
    problem = None if setting == "commands" else pyslurm_problem(runner)
    if setting == "commands" or problem is not None:
        if setting == "pyslurm":
            raise ArnoldError(f"slurm.backend = \"pyslurm\" but {problem}; install pyslurm built "
                              "against this Slurm (pip install '.[pyslurm]') or set "
                              "slurm.backend = \"auto\"")
        log.info("Slurm backend: commands%s", f" ({problem})" if problem else "")
        return CommandsBackend(runner)
    from slurm_arnold.slurm.pyslurm_backend import PyslurmBackend

    backend: SlurmBackend = PyslurmBackend(runner)
    log.info("Slurm backend: %s", backend.describe())
    return backend
