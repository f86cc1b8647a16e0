"""Ranks for nodes someone else chose: the DP x PP mapping of a job onto a fixed allocation.

When a job starts on nodes other than those it was planned on (Slurm chose them, it was
requeued after a failure, an admin moved it, or it was submitted with plain sbatch), only the
mapping is still ours to choose: which node holds which cell of the PP x D' matrix. That is the
placement problem with the free set equal to the allocation, solved by the same MIP.

The answer is never worse than what the job gets without us, Slurm's default task order (block
distribution over the allocation in Slurm's node order, Megatron's TP-DP-PP rank order), in
either spread: the MIP looks only among mappings whose DP and PP spreads are both within the
default's (``place(max_spreads=...)``); minimising the weighted sum alone could trade one spread
for the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from slurm_arnold.errors import InfeasibleError
from slurm_arnold.placement.baselines import slurm_sort_key
from slurm_arnold.placement.engine import place, place_from_node_list
from slurm_arnold.placement.job import JobShape
from slurm_arnold.placement.plan import Placement
from slurm_arnold.topology import Topology

#: The name of Slurm's own mapping among the candidates.
SLURM_ORDER = "slurm-order"


@dataclass(frozen=True)
class Mapping:
    """The chosen mapping of one allocation, beside Slurm's default order on the same nodes."""

    chosen: Placement
    default: Placement
    #: Why the MIP's answer was not taken, when it was not.
    note: str | None = None


def slurm_order(topology: Topology, nodes: Sequence[str], job: JobShape,
                alpha: float) -> Placement:
    """Slurm's default task order on ``nodes``: block distribution in Slurm's node order."""
    ordered = sorted(nodes, key=slurm_sort_key)
    return place_from_node_list(SLURM_ORDER, ordered, topology, job, alpha)


def map_allocation(topology: Topology, nodes: Sequence[str], job: JobShape, *,
                   alpha: float = 0.5, time_limit: float = 5.0) -> Mapping:
    """The best mapping of ``job`` onto exactly ``nodes`` (see the module docstring).

    Raises ``InfeasibleError`` when the allocation does not fit the shape (a different number
    of nodes, or a node the topology does not know).
    """
    if len(set(nodes)) != len(nodes):
        raise InfeasibleError("the allocation lists a node twice")
    if len(nodes) != job.nodes:
        raise InfeasibleError(f"TP {job.tp} x PP {job.pp} x DP {job.dp} on {job.gpus_per_node}"
                              f"-GPU nodes needs {job.nodes} nodes; the job has {len(nodes)}")
    default = slurm_order(topology, nodes, job, alpha)
    theirs = default.metrics
    try:
        ours = place(topology, nodes, job, algo="mip", alpha=alpha, time_limit=time_limit,
                     max_spreads=(theirs.max_dp_spread, theirs.max_pp_spread))
    except InfeasibleError as exc:
        # e.g. TP spans nodes but no leaf (or NVLink domain) of the allocation holds enough
        return Mapping(default, default, f"no mapping of our own ({exc})")
    # On a tie ours is kept: it also keeps every multi-node TP group in one leaf or domain.
    if ours.metrics.weighted_spread > theirs.weighted_spread:
        return Mapping(default, default, None)
    return Mapping(ours, default, None)
