"""The typed errors of slurm-arnold.

Library code raises these; only the CLI layer turns them into messages and exit codes
(see ``slurm_arnold.cli``). Every message is one line naming the problem and, where there is
one, the fix.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


class ArnoldError(Exception):
    """Base class of every error slurm-arnold reports to a user (exit code 1)."""


class ConfigError(ArnoldError):
    """The site or user configuration is invalid."""

    def __init__(self, path: Path | str | None, key: str | None, problem: str) -> None:
        self.path = path
        self.key = key
        self.problem = problem
        where = f"{path}: " if path else ""
        what = f"{key}: " if key else ""
        super().__init__(f"{where}{what}{problem}")


class TopologyError(ArnoldError):
    """A topology source (topology.conf or ``scontrol show topology``) is malformed."""

    def __init__(self, source: str, line: int | None, problem: str) -> None:
        self.source = source
        self.line = line
        self.problem = problem
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {problem}")


class SlurmError(ArnoldError):
    """A Slurm command failed; carries the command, its exit code and its output."""

    def __init__(
        self, command: Sequence[str], returncode: int, stdout: str, stderr: str
    ) -> None:
        self.command = list(command)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        detail = (stderr.strip() or stdout.strip()).splitlines()
        first = detail[0] if detail else "no output"
        super().__init__(f"`{' '.join(self.command)}` exited {returncode}: {first}{self.hint}")

    @property
    def hint(self) -> str:
        """The likely fix for failures whose cause is the set-up, not the request."""
        text = self.stderr + self.stdout
        if "resolve_ctls_from_dns_srv" in text or "Could not establish a configuration" in text:
            return " (no slurm.conf found: set SLURM_CONF, e.g. `source devcluster.env`)"
        if "Unable to contact slurm controller" in text or "Connection refused" in text:
            return " (slurmctld is not reachable: is the cluster up? `make cluster`)"
        return ""


class SlurmNotFound(ArnoldError):
    """A Slurm command is not installed or not on PATH."""

    def __init__(self, command: str) -> None:
        self.command = command
        super().__init__(
            f"`{command}` not found; install Slurm's client commands (Debian: slurm-client) "
            "or put them on PATH"
        )


class SlurmConfMissing(ArnoldError):
    """``SLURM_CONF`` names a file that is not there."""

    def __init__(self, path: str) -> None:
        self.path = path
        what = f"SLURM_CONF={path} does not exist" if path else "SLURM_CONF is set but empty"
        super().__init__(
            f"{what}; point it at the cluster's slurm.conf (the local "
            "cluster: source devcluster.env) or unset it"
        )


class SlurmOutputError(ArnoldError):
    """A Slurm command answered with output we cannot parse."""


class StateError(ArnoldError):
    """The state database cannot be opened or is inconsistent."""


class InfeasibleError(ArnoldError):
    """A request cannot be satisfied (too few free nodes, incompatible sizes, ...)."""
