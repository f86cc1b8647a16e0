"""The backend that runs Slurm's own commands (``--json`` where this Slurm's schema has a
parser, else their stable text forms), one document module each."""

from __future__ import annotations

from collections.abc import Sequence

from slurm_arnold.slurm.accounting import AccountingRecord, read_accounting
from slurm_arnold.slurm.jobs import JobInfo, read_jobs
from slurm_arnold.slurm.nodes import NodeInfo, read_nodes
from slurm_arnold.slurm.reservations import (
    Reservation,
    create_reservation,
    delete_reservation,
    read_reservations,
    update_reservation,
)
from slurm_arnold.slurm.runner import Runner


class CommandsBackend:
    """``SlurmBackend`` through ``sinfo``, ``scontrol``, ``squeue`` and ``sacct``."""

    name = "commands"

    def __init__(self, runner: Runner) -> None:
        self.runner = runner

    def describe(self) -> str:
        """The backend in words."""
        return "Slurm's commands"

    def nodes(self) -> list[NodeInfo]:
        """Every node with its state and GPUs."""
        return read_nodes(self.runner)

    def jobs(self, *, unfinished: bool = False, detail: bool = False) -> list[JobInfo]:
        """Every job slurmctld still knows (``unfinished``: only those not finished;
        ``detail``: their excluded nodes and features too)."""
        return read_jobs(self.runner, unfinished=unfinished, detail=detail)

    def reservations(self) -> list[Reservation]:
        """Every reservation."""
        return read_reservations(self.runner)

    def accounting(self, job_ids: Sequence[int] = (), *, since: str | None = None,
                   all_users: bool = True) -> list[AccountingRecord]:
        """Finished and running jobs from slurmdbd (``sacct``)."""
        return read_accounting(self.runner, job_ids, since=since,
                                          all_users=all_users)

    def create_reservation(self, name: str, nodes: Sequence[str], *, users: Sequence[str],
                           start: str = "now", duration: str = "UNLIMITED",
                           flags: Sequence[str] = ()) -> None:
        """Create a reservation on exactly ``nodes`` for ``users``."""
        create_reservation(self.runner, name, nodes, users=users, start=start,
                           duration=duration, flags=flags)

    def update_reservation(self, name: str, **fields: str) -> None:
        """Update fields (``Nodes``, ``StartTime``, ``Users``, ...) of a reservation."""
        update_reservation(self.runner, name, **fields)

    def delete_reservation(self, name: str) -> None:
        """Delete a reservation."""
        delete_reservation(self.runner, name)
