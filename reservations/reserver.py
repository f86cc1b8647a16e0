"""``arnold reserve`` in one object: Arnold's policy on the live cluster, Slurm reservations for
large pending jobs (LPJs) and the predictor's gate for short jobs, kept in step with Slurm by an
idempotent ``sync``. Each concern is a module of its own, found by name: ``planning`` (where an
LPJ would be reserved), ``changes`` (create, bind, release), ``admission`` (the gate),
``binder`` (waiting jobs arnold-sbatch placed), ``sync`` (the pass), ``listing``; all SQL is in
``records``.

**An LPJ** (a pending job of at least ``reservation.large_job_gpus`` GPUs) gets a reservation
on exactly its nodes for its user, ``StartTime=now`` with ``IGNORE_JOBS`` (running jobs keep
running; a reservation on busy nodes is refused without it), and is bound to it
(``ReservationName``). Its nodes are the ones it asked for (``-w``: arnold-sbatch plans them
with this policy and writes the rank files for them) or, for a job that named none, the
policy's choice (``reservations.policy.choose_reservation``). Only imminent LPJs are reserved:
nodes expected to drain within ``reservation.horizon_h``.
"""

from __future__ import annotations

from typing import Any

from predictor.live import LivePredictor
from reservations import admission, changes, listing, planning, sync
from reservations.context import Loop
from reservations.planning import Plan
from site_config import SiteConfig
from slurm_arnold.slurm import JobInfo, Slurm
from slurm_arnold.snapshot.snapshot import Snapshot
from slurm_arnold.state import StateDB


class Reserver(Loop):
    """``arnold reserve``: plan, create, release, admit, sync, list."""

    def __init__(self, config: SiteConfig, state: StateDB, slurm: Slurm | None = None) -> None:
        super().__init__(config, state, slurm or Slurm())

    def plan(self, job_id: int, snap: Snapshot | None = None,
             predictor: LivePredictor | None = None) -> Plan:
        """Where ``job_id`` would be reserved (a dry run; anyone may ask)."""
        if snap is None or predictor is None:
            snap, predictor = self.snapshot()
        return planning.plan_lpj(self, job_id, snap, predictor)

    def create(self, job_id: int, snap: Snapshot | None = None,
               predictor: LivePredictor | None = None, *, force: bool = True) -> str:
        """Reserve the planned nodes for LPJ ``job_id`` and bind it; the reservation's name.
        ``force=False`` (sync) skips an LPJ that is not imminent."""
        if snap is None or predictor is None:
            snap, predictor = self.snapshot()
        return changes.create(self, job_id, snap, predictor, force=force)

    def release(self, name: str, reason: str, snap: Snapshot | None = None) -> bool:
        """Delete our reservation ``name`` (``changes.release``)."""
        return changes.release(self, name, reason, snap or Snapshot.read(self.slurm,
                                                                         self.config))

    def admit(self, snap: Snapshot, predictor: LivePredictor, job: JobInfo,
              source: str) -> str | None:
        """Decide one pending short job's admission (``admission.admit``)."""
        return admission.admit(self, snap, predictor, job, source)

    def sync(self) -> list[str]:
        """One idempotent pass (``reservations.sync``); the actions taken."""
        return sync.sync(self)

    def listing(self) -> list[dict[str, Any]]:
        """Our reservations as Slurm and the database know them (``arnold reserve list``)."""
        return listing.listing(self)
