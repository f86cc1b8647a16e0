"""A placement: which nodes hold which cell of the communication matrix, and its spreads."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slurm_arnold.placement.job import JobShape
from slurm_arnold.topology import Topology, spread_tiers, tiers

Cell = tuple[int, int]  # (pp, column)


@dataclass(frozen=True)
class Metrics:
    """Spreads (distinct minipods) of the job's communication groups."""

    max_dp_spread: int
    max_pp_spread: int
    weighted_spread: float
    minipods_used: int

    def as_dict(self) -> dict[str, Any]:
        """The ``metrics`` object of ``arnold place --json``."""
        return {"max_dp_spread": self.max_dp_spread, "max_pp_spread": self.max_pp_spread,
                "weighted_spread": self.weighted_spread, "minipods_used": self.minipods_used}


@dataclass
class Placement:
    """Nodes of every unit (``cells[(pp, column)]`` lists the unit's m nodes in TP order)."""

    algo: str
    job: JobShape
    alpha: float
    cells: dict[Cell, list[str]]
    metrics: Metrics
    solve_seconds: float = 0.0
    gap: float | None = None
    dual_bound: float | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def assignment(self) -> list[dict[str, Any]]:
        """One entry per (node, replica): ``{"node", "pp", "dp", "tp": [first, end]}``."""
        job = self.job
        k, g = job.replicas_per_node, job.gpus_per_node
        out = []
        for (pp, col), nodes in sorted(self.cells.items(), key=lambda kv: (kv[0][0], kv[0][1])):
            for index, node in enumerate(nodes):
                for r in range(k):
                    tp = [index * g, (index + 1) * g] if job.tp > g else [0, job.tp]
                    out.append({"node": node, "pp": pp, "dp": col * k + r, "tp": tp})
        return out

    def nodes(self) -> list[str]:
        """Every node of the placement, in cell order."""
        return [n for _, nodes in sorted(self.cells.items()) for n in nodes]

    def as_json(self) -> dict[str, Any]:
        """The ``arnold place --json`` object. For the MIP also the proof: ``dual_bound`` (no
        placement has a smaller weighted spread), ``status`` (optimal or gap), ``proved_by``
        (how many spread boxes below the answer each argument ruled out), ``open_box`` (the
        cheapest box nothing decided, where the bound comes from; null when optimal or
        when the bound is proven and the gap is a trade),
        ``stopped`` (proven, node limit, stalled, time limit, or ``traded for the tiers the
        rivals won``), ``found_by`` (what built the answer: a baseline's name, ``bands``,
        ``bands (exact)``, ``mip``, or ``<rival>'s nodes``) and, on a topology with NVLink
        domains, ``dominance`` (``placement.dominate``: how many (rival, tier) pairs the
        MIP's own answer and the one kept are worse at). Null for the baselines."""
        info = self.info
        return {"algo": self.algo, "assignment": self.assignment(),
                "metrics": self.metrics.as_dict(), "solve_seconds": round(self.solve_seconds, 4),
                "gap": self.gap, "dual_bound": self.dual_bound, "status": info.get("status"),
                "proved_by": info.get("proved_by"), "open_box": info.get("open_box"),
                "stopped": info.get("stopped"), "found_by": info.get("source"),
                "dominance": info.get("dominance")}


def measure(cells: Mapping[Cell, Sequence[str]], job: JobShape, topology: Topology,
            alpha: float) -> Metrics:
    """Spreads of a cell map: DP group = a row (one stage), PP group = a column (one replica)."""
    dp_spread, pp_spread, used = worst_spreads(cells, topology.minipod_of)
    return Metrics(dp_spread, pp_spread,
                   round(alpha * dp_spread + (1 - alpha) * pp_spread, 6), used)


def worst_spreads(cells: Mapping[Cell, Sequence[str]],
                  where: Callable[[str], str]) -> tuple[int, int, int]:
    """(worst DP spread, worst PP spread, places used): distinct ``where(node)`` per group."""
    rows: dict[int, set[str]] = {}
    cols: dict[int, set[str]] = {}
    used: set[str] = set()
    for (pp, col), nodes in cells.items():
        places = set(map(where, nodes))
        rows.setdefault(pp, set()).update(places)
        cols.setdefault(col, set()).update(places)
        used |= places
    return (max((len(v) for v in rows.values()), default=0),
            max((len(v) for v in cols.values()), default=0), len(used))


def spreads_per_tier(cells: Mapping[Cell, Sequence[str]],
                     topology: Topology) -> list[dict[str, Any]]:
    """DP and PP spreads counted at every tier of the tree, nearest first (the NVLink domain
    first where the topology has domains, then each position of ``Topology.path_of``): how
    many distinct domains, leaves, ..., switches each group touches, at worst. The minipod
    tier's pair is the objective's (``measure``)."""
    out = []
    for name, where in tier_places(topology):
        dp_spread, pp_spread, _ = worst_spreads(cells, where)
        out.append({"tier": name, "max_dp_spread": dp_spread, "max_pp_spread": pp_spread})
    return out


def tier_places(topology: Topology) -> list[tuple[str, Callable[[str], str]]]:
    """Every tier of ``blocks.spread_tiers``, nearest first, with node -> its place there."""
    path_names = tiers(topology)
    out: list[tuple[str, Callable[[str], str]]] = []
    for name in spread_tiers(topology):
        if name in path_names:
            out.append((name, functools.partial(place_at, topology, k=path_names.index(name))))
        else:  # NVLink domains that are not the leaves
            out.append((name, lambda n: topology.domains.get(n, n)))
    return out


def place_at(topology: Topology, node: str, *, k: int) -> str:
    """The switch at position ``k`` of ``node``'s path (its leaf is 0; the top past the end)."""
    path = topology.path_of(node)
    return path[min(k, len(path) - 1)]


def cells_from_rank_order(nodes: Sequence[str], job: JobShape) -> dict[Cell, list[str]]:
    """Cells a user gets today from a node list: Megatron's default order, TP fastest, then DP,
    then PP, so consecutive units (of m nodes) form a DP group."""
    m, cols = job.nodes_per_unit, job.columns
    return {(u // cols, u % cols): list(nodes[u * m:(u + 1) * m]) for u in range(job.units)}
