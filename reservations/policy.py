"""Arnold's queue policy: where a large pending job (LPJ) is reserved, and which short jobs may
use its reserved nodes meanwhile. Pure code: the simulator uses it now, the live cluster's
``arnold reserve`` later.

**Choosing the LPJ's nodes.** Every eligible node gets a predicted drain time: now if it is
idle, else the latest predicted end of the jobs on it (a running job's end is its start plus
the upper-quantile prediction, capped at its time limit; a job already past its prediction is
expected to run to its limit). Candidate pools are the ``n``, ``1.25n``, ``1.5n``, ``2n`` and
``3n`` nodes that drain first (``n`` = the LPJ's nodes); a pool's expected start ``T`` is when
its last node drains. The placement engine lays the LPJ out inside each pool, and the pool
with the least ``(T - now) in hours + spread_weight_h x weighted spread`` wins (ties: the
earlier start). So a larger pool is taken only when the spread it saves is worth more than
the wait it adds, at ``spread_weight_h`` hours per unit of weighted spread (default 1 h).
Only *imminent* LPJs are reserved: pools that drain later than a horizon (default 2 h) are not
considered, and an LPJ with none left waits as an ordinary Slurm job, because nodes held for a
far-off start sit idle (or serve only short jobs) all that time.

**Paying for itself.** Given ``slurm_start``, when the LPJ would start without a reservation
(Slurm's own plan: the time its nodes drain if every job runs to its limit), a pool is taken
only when what it saves the LPJ outweighs what it costs everyone else: the LPJ's nodes times
the hours it starts earlier must be at least the node-hours the pool's nodes would sit idle
between draining and the start (``idle_share`` of them: the part admitted short jobs are not
expected to fill). A far-off start costs more idle hours (nodes drain early and wait), so this
is a horizon that follows the queue and the predictions rather than a constant.

**Admitting a short job.** A job may start on idle reserved nodes only when ``now`` plus its
upper-quantile prediction is at or before the LPJ's expected start. In ``share`` mode it then
runs to its end (a misprediction delays the LPJ); in ``shrink`` mode its time limit is cut to
the expected start (a misprediction ends it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from slurm_arnold.errors import InfeasibleError
from slurm_arnold.placement import JobShape, Placement, place
from slurm_arnold.topology import Topology

POOL_FACTORS = (1.0, 1.25, 1.5, 2.0, 3.0)
MODES = ("share", "shrink")


@dataclass(frozen=True)
class ReservationChoice:
    """The nodes chosen for an LPJ, its layout on them, and when they are expected to drain."""

    nodes: tuple[str, ...]
    placement: Placement
    expected_start: float
    cost: float
    candidates: tuple[tuple[int, float, float], ...]  # (pool size, start, weighted spread)
    #: Node-hours the chosen nodes wait idle for the start, and what the start saves the LPJ
    #: (its nodes x hours before ``slurm_start``; ``None`` without one).
    idle_node_h: float = 0.0
    saved_node_h: float | None = None


def lpj_layout(nodes: int) -> tuple[int, int]:
    """(PP, DP) assumed for an LPJ whose layout is not known (TP = one node): PP 4, else 2,
    else 1, whichever divides the nodes. The simulator and the live side share it."""
    pp = 4 if nodes % 4 == 0 else 2 if nodes % 2 == 0 else 1
    return pp, nodes // pp


def expected_end(start: float, predicted: float, limit: float, now: float) -> float:
    """When a running job is expected to end: start + prediction (capped at the limit); a job
    already past its prediction is expected to run to its limit."""
    end = start + min(predicted, limit)
    return end if end > now else max(now, start + limit)


def choose_reservation(topology: Topology, names: Sequence[str], drain: np.ndarray,
                       eligible: np.ndarray, now: float, shape: JobShape, *,
                       algo: str = "mip", alpha: float = 0.5, time_limit: float | None = None,
                       spread_weight_h: float = 1.0,
                       horizon_s: float = math.inf, slurm_start: float | None = None,
                       idle_share: float = 1.0,
                       placer: Callable[[Sequence[str], JobShape], Placement] | None = None,
                       index: Mapping[str, int] | None = None,
                       ) -> ReservationChoice | None:
    """Pick the LPJ's nodes among ``eligible`` ones (see the module docstring).

    ``drain[i]`` is node i's predicted drain time (``now`` or earlier when idle). Pools that
    would start later than ``now + horizon_s``, or (given ``slurm_start``) that do not pay for
    themselves, are not considered; ``None`` when none is left (reserving for the job now
    would cost others more than it saves it). ``placer`` lays the job out on a pool instead
    of ``place`` (the simulator's memo); ``index`` maps each of ``names`` to its position
    (made here when not given; the simulator keeps one).
    """
    n = shape.nodes
    when = np.where(eligible, np.maximum(drain, now), np.inf)
    ordered = np.sort(when[eligible])
    if len(ordered) < n:
        raise InfeasibleError(f"the job needs {n} nodes; only {len(ordered)} can be reserved")
    if slurm_start is not None and not _any_pays(ordered, n, slurm_start, idle_share):
        return None  # no n nodes at all would pay: skip the placements
    if index is None:
        index = {name: i for i, name in enumerate(names)}
    best: ReservationChoice | None = None
    tried: list[tuple[int, float, float]] = []
    for size in sorted({min(len(ordered), math.ceil(n * f)) for f in POOL_FACTORS}):
        start = float(ordered[size - 1])
        if start - now > horizon_s:
            break
        pool = [names[int(i)] for i in np.flatnonzero(when <= start)]
        placement = (placer(pool, shape) if placer is not None else
                     place(topology, pool, shape, algo=algo, alpha=alpha, time_limit=time_limit))
        spread = placement.metrics.weighted_spread
        tried.append((size, start, spread))
        chosen = placement.nodes()
        ready = np.array([when[index[c]] for c in chosen])
        expected = float(ready.max())
        idle_h = float(np.sum(expected - ready)) / 3600.0
        saved_h = None if slurm_start is None else n * (slurm_start - expected) / 3600.0
        if saved_h is not None and saved_h < idle_share * idle_h:
            continue  # costs the others more than it saves the LPJ
        cost = (start - now) / 3600.0 + spread_weight_h * spread
        if best is None or cost < best.cost - 1e-9:
            best = ReservationChoice(tuple(chosen), placement, expected, cost, (), idle_h,
                                     saved_h)
    if best is None:
        return None
    return ReservationChoice(best.nodes, best.placement, best.expected_start, best.cost,
                             tuple(tried), best.idle_node_h, best.saved_node_h)


def _any_pays(ordered: np.ndarray, n: int, slurm_start: float, idle_share: float) -> bool:
    """Whether any n of the nodes (drain times ``ordered``, ascending) pay for themselves.

    Nodes starting at E idle least when they are the n latest to drain by E: n consecutive
    drains ending at E. Trying every E is exact for any choice of n nodes, so no pool the
    policy would take is skipped."""
    if not math.isfinite(slurm_start):
        return True
    drains = ordered[np.isfinite(ordered)]
    if len(drains) < n:
        return False
    sums = np.concatenate(([0.0], np.cumsum(drains)))
    ends = drains[n - 1:]
    idle = n * ends - (sums[n:] - sums[:-n])
    return bool(np.any(n * (slurm_start - ends) >= idle_share * idle - 1e-6))


def admits(now: float, predicted_runtime: float, expected_start: float) -> bool:
    """Whether a short job predicted to run ``predicted_runtime`` may use the reserved nodes."""
    return now + predicted_runtime <= expected_start


def shrunk_limit(now: float, expected_start: float) -> float:
    """The time limit an admitted job gets in ``shrink`` mode."""
    return max(0.0, expected_start - now)
