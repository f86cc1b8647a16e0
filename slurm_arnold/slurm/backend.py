"""The seam between slurm-arnold and a way of reaching Slurm: what the rest of the code reads
(nodes, jobs, reservations, accounting) and the admin side's reservation writes (partitions
are read once per decision and stay the commands' in every case).
``Slurm`` (``slurm_arnold.slurm.adapter``) serves them through a backend; ``commands`` runs
Slurm's commands, and a second backend (a library binding such as pyslurm) plugs in here
without touching callers. Submitting stays ``sbatch``'s in every case."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from slurm_arnold.slurm.accounting import AccountingRecord
from slurm_arnold.slurm.jobs import JobInfo
from slurm_arnold.slurm.nodes import NodeInfo
from slurm_arnold.slurm.reservations import Reservation


class SlurmBackend(Protocol):
    """One way of reading Slurm's state and writing reservations."""

    #: What ``arnold site show`` and ``-v`` name as the serving backend.
    name: str

    def describe(self) -> str:
        """The backend in words, with its version where it has one."""

    def nodes(self) -> list[NodeInfo]:
        """Every node with its state and GPUs."""

    def jobs(self, *, unfinished: bool = False, detail: bool = False) -> list[JobInfo]:
        """Every job slurmctld still knows (``unfinished``: only those not finished;
        ``detail``: their excluded nodes and features too)."""

    def reservations(self) -> list[Reservation]:
        """Every reservation."""

    def accounting(self, job_ids: Sequence[int] = (), *, since: str | None = None,
                   all_users: bool = True) -> list[AccountingRecord]:
        """Finished and running jobs from slurmdbd."""

    def create_reservation(self, name: str, nodes: Sequence[str], *, users: Sequence[str],
                           start: str = "now", duration: str = "UNLIMITED",
                           flags: Sequence[str] = ()) -> None:
        """Create a reservation on exactly ``nodes`` for ``users``."""

    def update_reservation(self, name: str, **fields: str) -> None:
        """Update fields (``Nodes``, ``StartTime``, ``Users``, ...) of a reservation."""

    def delete_reservation(self, name: str) -> None:
        """Delete a reservation."""
