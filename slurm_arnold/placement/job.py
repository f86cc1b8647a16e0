"""A training job's shape and the placement units it needs.

A job has ``TP x PP x DP`` GPUs on nodes of ``g`` GPUs. Placement works on *units*: one cell of
the PP x D' communication matrix, where

- TP = g: a unit is one node holding stage ``pp`` of replica ``dp`` (D' = DP);
- TP < g: a node holds k = g/TP replicas of one stage, so a unit is one node holding replicas
  ``k*c .. k*c+k-1`` of stage ``pp`` (D' = DP/k; DP must be a multiple of k);
- TP > g: a TP group spans m = TP/g nodes of one NVLink domain (where the topology has
  domains: a GB200 NVL72 rack) or else of one leaf switch, so a unit is m nodes of one such
  group (D' = DP).
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_arnold.errors import InfeasibleError


@dataclass(frozen=True)
class JobShape:
    """TP x PP x DP on nodes of ``gpus_per_node`` GPUs."""

    tp: int
    pp: int
    dp: int
    gpus_per_node: int

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp", "gpus_per_node"):
            if getattr(self, name) < 1:
                raise InfeasibleError(f"--{name.replace('_', '-')} must be at least 1")
        g, tp = self.gpus_per_node, self.tp
        if tp < g and g % tp:
            raise InfeasibleError(
                f"TP={tp} does not divide the {g} GPUs of a node; use a TP that divides {g}"
            )
        if tp > g and tp % g:
            raise InfeasibleError(
                f"TP={tp} is not a multiple of the {g} GPUs of a node; use a multiple of {g}"
            )
        if tp < g and self.dp % (g // tp):
            raise InfeasibleError(
                f"DP={self.dp} with TP={tp} leaves nodes half used: a node holds {g // tp} "
                f"replicas of one stage, so DP must be a multiple of {g // tp}"
            )

    @classmethod
    def from_nodes(cls, nodes: int, tp: int, pp: int, gpus_per_node: int) -> JobShape:
        """The shape with DP = nodes * g / (TP * PP); an error when that is not whole."""
        total = nodes * gpus_per_node
        if nodes < 1 or total % (tp * pp):
            raise InfeasibleError(
                f"{nodes} nodes x {gpus_per_node} GPUs = {total} GPUs is not a multiple of "
                f"TP x PP = {tp} x {pp} = {tp * pp}; change --nodes, --tp or --pp"
            )
        return cls(tp, pp, total // (tp * pp), gpus_per_node)

    @property
    def replicas_per_node(self) -> int:
        """k: replicas of one stage on one node (1 unless TP < g)."""
        return max(1, self.gpus_per_node // self.tp)

    @property
    def nodes_per_unit(self) -> int:
        """m: nodes of one TP group (1 unless TP > g)."""
        return max(1, self.tp // self.gpus_per_node)

    @property
    def columns(self) -> int:
        """D': unit columns of the communication matrix."""
        return self.dp // self.replicas_per_node

    @property
    def units(self) -> int:
        """Cells of the PP x D' matrix."""
        return self.pp * self.columns

    @property
    def nodes(self) -> int:
        """Nodes the job needs."""
        return self.units * self.nodes_per_unit

    @property
    def gpus(self) -> int:
        """GPUs the job uses."""
        return self.tp * self.pp * self.dp
