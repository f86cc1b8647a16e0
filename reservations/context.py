"""What every step of the admin loop works with: the site's settings, its records, the Slurm
adapter, one lock, and the actions taken so far (what ``arnold reserve`` prints)."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from predictor.live import LivePredictor
from reservations.records import Records
from site_config import SiteConfig
from site_config.settings import ReservationSettings
from slurm_arnold.slurm import Slurm
from slurm_arnold.snapshot.snapshot import Snapshot
from slurm_arnold.state import StateDB


@dataclass
class Loop:
    """One run of the admin side (a ``sync`` pass, a ``create``, a ``release``)."""

    config: SiteConfig
    state: StateDB
    slurm: Slurm
    actions: list[str] = field(default_factory=list)

    @property
    def settings(self) -> ReservationSettings:
        """The site's ``[reservation]`` settings."""
        return self.config.reservation

    @property
    def records(self) -> Records:
        """The site database's reservations, admissions and bindings."""
        return Records(self.state)

    @contextmanager
    def lock(self) -> Iterator[None]:
        """One changer of reservations at a time (``sync``, ``create``, ``release`` and an
        admin's arnold-sbatch): each plans on a fresh reading, so two at once could both pick
        the same nodes."""
        self.config.state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.config.state_dir / "reserve.lock", os.O_RDWR | os.O_CREAT, 0o600)
        os.fchmod(fd, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def snapshot(self) -> tuple[Snapshot, LivePredictor]:
        """Slurm now, and the predictor over its jobs."""
        snap = Snapshot.read(self.slurm, self.config)
        return snap, LivePredictor(self.config, self.state, list(snap.jobs.values()))
