"""What the simulator plans: an LPJ's reservation, and a job's planned start in a backfill
pass."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from slurm_arnold.sim.jobs import SimJob


@dataclass
class Reservation:
    """An LPJ's reservation in the simulation."""

    rid: int
    job: SimJob
    nodes: np.ndarray  # node indices
    cells: dict[tuple[int, int], list[str]]
    spread: float
    created: float
    admitted: set[int] = field(default_factory=set)
    declined_at: int = 0  # free nodes when starting elsewhere was last judged worse
    earliest: float = 0.0  # the earliest drain of any n eligible nodes when it was planned
    planned: float = 0.0  # its own expected start when it was planned
    promised: float = 0.0  # latest predicted end of a job admitted into it


@dataclass
class BackfillPlan:
    """A pending job's planned start in one backfill pass, and the nodes it holds."""

    start: float
    end: float
    mask: np.ndarray
    starved: bool = False  # an LPJ's, waiting unreserved for lpj_starved_h or longer
    lpj: bool = False
