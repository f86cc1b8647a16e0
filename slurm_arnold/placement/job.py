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


#: Which ranks must share one NVLink domain: the TP group, TP x CP or TP x EP.
NVLINK_GROUPS = ("tp", "tp-cp", "tp-ep")


@dataclass(frozen=True)
class Parallelism:
    """A job's ranks beyond TP x PP x DP, in Megatron-Core's order ``tp-cp-ep-dp-pp``.

    RANK = tp + TP*(cp + CP*(dp + DP*pp)); expert parallelism splits the DP replicas into
    groups of EP consecutive ones (ep = dp mod EP). ``nvlink`` names the group that must stay
    in one NVLink domain (one node when it fits in one). Placement sees an equivalent
    ``JobShape`` whose unit is that group and whose ranks, in the default order, are the
    same numbers (:meth:`shape`, :meth:`coords`):

    - ``tp``: units are TP groups; CP peers count as DP (a row is a stage's DP x CP ranks,
      the group its gradients are reduced over);
    - ``tp-cp``: units are TP x CP ranks of one stage of one replica;
    - ``tp-ep``: units are TP x EP ranks, EP consecutive replicas of one stage (CP = 1).

    ``segment_units`` > 1 makes each unit that many NVLink groups of consecutive replicas of
    one stage: a Slurm ``--segment`` of that many groups' nodes, mapped onto replicas, so every
    domain holds whole segments. Rank numbers are again unchanged. ``segment_stages`` > 1 maps
    the segment onto stages instead: each unit is that many groups of consecutive stages of one
    replica (the pipeline's neighbours share a domain). Those ranks are not consecutive in
    Megatron's order, so :meth:`rank` numbers a rank from its own coordinates; the spreads are
    the shape's (a stage's DP group crosses the same minipods as its unit's).
    """

    tp: int
    pp: int
    dp: int
    cp: int = 1
    ep: int = 1
    nvlink: str = "tp"
    segment_units: int = 1
    segment_stages: int = 1

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp", "cp", "ep"):
            if getattr(self, name) < 1:
                raise InfeasibleError(f"--{name} must be at least 1")
        if self.nvlink not in NVLINK_GROUPS:
            raise InfeasibleError(f"--nvlink-group {self.nvlink}: use one of "
                                  f"{', '.join(NVLINK_GROUPS)}")
        if self.dp % self.ep:
            raise InfeasibleError(f"EP={self.ep} does not divide DP={self.dp}: expert groups "
                                  "are made of whole DP replicas; change --ep or the job's size")
        if self.nvlink == "tp-ep" and self.cp > 1:
            raise InfeasibleError("--nvlink-group tp-ep with --cp above 1 would make the group "
                                  "TP x CP x EP; use --nvlink-group tp-cp or --cp 1")
        if self.segment_units < 1 or self.segment_stages < 1:
            raise InfeasibleError("segment_units and segment_stages must be at least 1")
        if self.segment_units > 1 and self.segment_stages > 1:
            raise InfeasibleError("a segment maps onto replicas or onto stages, not both")

    @property
    def plain(self) -> bool:
        """No CP, no EP, TP as the NVLink group: the shape is the job itself."""
        return self.cp == 1 and self.ep == 1 and self.nvlink == "tp" and \
            self.segment_units == 1 and self.segment_stages == 1

    @property
    def group(self) -> int:
        """Ranks of the NVLink group."""
        return self.tp * {"tp": 1, "tp-cp": self.cp, "tp-ep": self.ep}[self.nvlink]

    @property
    def gpus(self) -> int:
        """Ranks (GPUs) of the job."""
        return self.tp * self.cp * self.pp * self.dp

    def shape(self, gpus_per_node: int) -> JobShape:
        """The placement's matrix: units are NVLink groups, or segments of them (see the class
        docstring)."""
        base = self._group_shape(gpus_per_node)
        if self.segment_stages > 1:
            q = self.segment_stages
            if base.pp % q:
                raise InfeasibleError(f"a segment of {q} groups of consecutive stages needs PP "
                                      f"a multiple of {q} (it is {base.pp})")
            return JobShape(base.tp * q, base.pp // q, base.dp, gpus_per_node)
        q = self.segment_units
        if q == 1:
            return base
        if base.dp % q:
            raise InfeasibleError(f"a segment of {q} groups of consecutive replicas needs DP "
                                  f"a multiple of {q} (it is {base.dp})")
        return JobShape(base.tp * q, base.pp, base.dp // q, gpus_per_node)

    def _group_shape(self, gpus_per_node: int) -> JobShape:
        g, group = gpus_per_node, self.group
        if not self.plain:
            what = {"tp": "TP", "tp-cp": "TP x CP", "tp-ep": "TP x EP"}[self.nvlink]
            if group < g and g % group:
                raise InfeasibleError(f"the NVLink group {what} = {group} does not divide the "
                                      f"{g} GPUs of a node; change --tp, --cp or --ep")
            if group > g and group % g:
                raise InfeasibleError(f"the NVLink group {what} = {group} is not a multiple "
                                      f"of the {g} GPUs of a node; change --tp, --cp or --ep")
        if self.nvlink == "tp":
            return JobShape(self.tp, self.pp, self.dp * self.cp, g)
        if self.nvlink == "tp-cp":
            return JobShape(self.tp * self.cp, self.pp, self.dp, g)
        return JobShape(self.tp * self.ep, self.pp, self.dp // self.ep, g)

    def coords(self, tp: int, pp: int, dp: int) -> tuple[int, int, int, int]:
        """(tp, pp, dp, cp) of the rank at the shape's coordinates (tp, pp, dp)."""
        if self.segment_units > 1:
            tp, dp = tp % self.group, dp * self.segment_units + tp // self.group
        if self.segment_stages > 1:
            tp, pp = tp % self.group, pp * self.segment_stages + tp // self.group
        if self.nvlink == "tp":
            return tp, pp, dp // self.cp, dp % self.cp
        if self.nvlink == "tp-cp":
            return tp % self.tp, pp, dp, tp // self.tp
        return tp % self.tp, pp, dp * self.ep + tp // self.tp, 0

    def rank(self, tp: int, pp: int, dp: int, cp: int = 0) -> int:
        """The rank of the job's own coordinates in Megatron-Core's order tp-cp-ep-dp-pp."""
        return tp + self.tp * (cp + self.cp * (dp + self.dp * pp))

    @classmethod
    def of(cls, job: JobShape) -> Parallelism:
        """The plain parallelism of a shape (no CP, no EP)."""
        return cls(job.tp, job.pp, job.dp)

    @classmethod
    def sized(cls, tp: int, pp: int, dp: int | None, nodes: int | None, gpus_per_node: int, *,
              cp: int = 1, ep: int = 1, nvlink: str = "tp") -> Parallelism:
        """DP given, or DP = nodes * g / (TP * CP * PP); an error when that is not whole."""
        if dp is None:
            total = (nodes or 0) * gpus_per_node
            if total < 1 or total % (tp * cp * pp):
                raise InfeasibleError(
                    f"{nodes} nodes x {gpus_per_node} GPUs = {total} GPUs is not a multiple of "
                    f"TP x CP x PP = {tp} x {cp} x {pp} = {tp * cp * pp}; change --nodes, --tp, "
                    "--cp or --pp")
            dp = total // (tp * cp * pp)
        return cls(tp, pp, dp, cp, ep, nvlink)

    def as_json(self) -> dict[str, int | str]:
        """``arnold place --json``'s ``parallelism``: the job's own sizes, its NVLink group
        and that group's GPUs (the placement's ``assignment`` is in the equivalent shape)."""
        return {"tp": self.tp, "pp": self.pp, "dp": self.dp, "cp": self.cp, "ep": self.ep,
                "nvlink_group": self.nvlink, "group_gpus": self.group}
