"""Planning a job that cannot start now (arnold-sbatch): the nodes that drain soonest,
traded against spread, among those it may use; it waits in Slurm's queue for them."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping

import hostlist

from site_config import SiteConfig
from slurm_arnold.errors import InfeasibleError
from slurm_arnold.placement import JobShape, Placement
from slurm_arnold.snapshot.snapshot import Snapshot
from slurm_arnold.snapshot.view import ClusterView, narrow_free

log = logging.getLogger(__name__)


def plan_queued(config: SiteConfig, snap: Snapshot, job: JobShape, alpha: float,
                sbatch: Mapping[str, str]) -> Placement:
    """A job that cannot start now: the policy's nodes for it (those that drain soonest,
    traded against spread), laid out for its own shape, among the nodes it may use at all
    (its partition, ``-x``, ``-w``, ``-C``: ``sbatch``, its sbatch options). It waits in
    Slurm's queue for them; ``arnold reserve sync`` re-plans it when one of them fails or
    enough others free up first, and reserves them when the job is large (at once when the
    submitter is an admin). Only a job that can never run (more nodes than it may use are in
    service) is refused. ``snap``: the cluster as read under the site lock."""
    from predictor.live import LivePredictor
    from slurm_arnold.snapshot.wait_plan import plan_nodes

    usable = snap.usable()
    part = f"partition {snap.view.partition}" if snap.view.partition else "the cluster"
    if job.nodes > len(usable):
        raise InfeasibleError(f"{job.nodes} nodes needed but {part} has only "
                              f"{len(usable)} in service; ask for at most {len(usable)}")
    narrowing = dict(sbatch)
    if len(hostlist.expand_hostlist(sbatch.get("nodelist", ""))) < job.nodes:
        # A -w of fewer nodes than the job asks for names nodes it must include, not the
        # only ones it may use; the plan does not keep to it (as before this check).
        narrowing.pop("nodelist", None)
    allowed = narrow_free(ClusterView(snap.view.topology, snap.view.nodes, set(usable),
                                      snap.view.partition), narrowing, set())
    if job.nodes > len(allowed):
        raise InfeasibleError(
            f"{job.nodes} nodes needed but only {len(allowed)} of {part}'s nodes in "
            "service match its -x/-w/-C; ask for fewer nodes or widen those options")
    predictor = LivePredictor(config, None, list(snap.jobs.values()))
    choice = plan_nodes(snap, predictor, job,
                        horizon_s=math.inf, alpha=alpha,
                        spread_weight_h=config.reservation.spread_weight_h, allowed=allowed)
    assert choice is not None  # an infinite horizon always leaves a pool
    wait_min = max(0.0, choice.expected_start - snap.now) / 60
    log.info("%d nodes are not free now; queued for %s, expected to drain in %.0f min "
             "(weighted spread %.2f); `arnold reserve sync` re-plans it if they fail or others "
             "free first", job.nodes, hostlist.collect_hostlist(list(choice.nodes)),
             wait_min, choice.placement.metrics.weighted_spread)
    return choice.placement
