"""The ``arnold-rankorder v1`` file: written by arnold-sbatch, read by the SPANK plugin.

Format (docs/rankorder.md)::

    arnold-rankorder v1
    world_size 128
    master_addr n001
    master_port 24917
    placement_id 5f0c2d9e1a7b
    tp 8
    pp 4
    dp 4
    order tp-dp-pp
    ranks
    0 n001 0 0 0 0          # rank node local_rank tp pp dp, one line per rank, in rank order

With the default order ``tp-dp-pp``, RANK = tp + TP*(dp + DP*pp): Megatron's own order, so the
framework's group construction from RANK lands exactly on the placement. Each node's local
ranks are its ranks in increasing order (its TP ranks in order).

A job with context or expert parallelism (``placement.Parallelism``) adds the headers ``cp N``
and ``ep N`` (each only when above 1) and, with CP, a seventh column ``cp`` on each rank line;
RANK is then Megatron-Core's ``tp-cp-ep-dp-pp``: tp + TP*(cp + CP*(dp + DP*pp)), EP groups
being EP consecutive DP replicas. Only the default order is defined for such jobs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from slurm_arnold.errors import ArnoldError
from slurm_arnold.files import write_atomically
from slurm_arnold.placement import Parallelism, Placement

ORDERS = ("tp-dp-pp", "tp-pp-dp", "dp-tp-pp", "pp-tp-dp", "dp-pp-tp", "pp-dp-tp")
MAGIC = "arnold-rankorder v1"


@dataclass(frozen=True)
class RankEntry:
    """One rank of the job."""

    rank: int
    node: str
    local_rank: int
    tp: int
    pp: int
    dp: int
    cp: int = 0


def rank_of(order: str, tp: int, pp: int, dp: int, sizes: dict[str, int]) -> int:
    """The rank of coordinates (tp, pp, dp) in ``order`` (fastest-varying dimension first)."""
    coords = {"tp": tp, "pp": pp, "dp": dp}
    rank, scale = 0, 1
    for dim in order.split("-"):
        rank += coords[dim] * scale
        scale *= sizes[dim]
    return rank


def rank_entries(placement: Placement, order: str = "tp-dp-pp",
                 parallelism: Parallelism | None = None) -> list[RankEntry]:
    """Every rank of the placement, in rank order; ``parallelism``: the job's CP, EP and
    NVLink group when the placement's shape is its equivalent (default: none)."""
    if order not in ORDERS:
        raise ArnoldError(f"unknown rank order {order!r}; use one of {', '.join(ORDERS)}")
    job = placement.job
    par = parallelism or Parallelism.of(job)
    if not par.plain:
        if order != ORDERS[0]:
            raise ArnoldError(f"rank order {order} with CP or EP: only {ORDERS[0]} "
                              "(Megatron-Core's tp-cp-ep-dp-pp) is defined; drop --rank-order")
        if par.shape(job.gpus_per_node) != job:
            raise ArnoldError("the placement's shape is not the job's parallelism's")
    sizes = {"tp": job.tp, "pp": job.pp, "dp": job.dp}
    coords: dict[int, tuple[str, int, int, int, int]] = {}
    for e in placement.assignment():
        for t in range(e["tp"][0], e["tp"][1]):
            own = par.coords(t, e["pp"], e["dp"])
            rank = rank_of(order, t, e["pp"], e["dp"], sizes) if par.plain else par.rank(*own)
            coords[rank] = (e["node"], *own)
    per_node: dict[str, list[int]] = {}
    for rank in sorted(coords):
        per_node.setdefault(coords[rank][0], []).append(rank)
    local = {r: i for ranks in per_node.values() for i, r in enumerate(ranks)}
    return [RankEntry(r, c[0], local[r], c[1], c[2], c[3], c[4])
            for r, c in sorted(coords.items())]


def master_port(placement_id: str) -> int:
    """A port in 20000..29999 derived from the placement id (distinct jobs rarely collide)."""
    return 20000 + int(placement_id[:8], 16) % 10000


def render(entries: list[RankEntry], placement: Placement, placement_id: str,
           order: str = "tp-dp-pp", parallelism: Parallelism | None = None) -> str:
    """The rank-order file's text."""
    par = parallelism or Parallelism.of(placement.job)
    extra = [f"{k} {v}" for k, v in (("cp", par.cp), ("ep", par.ep)) if v > 1]
    cp = par.cp > 1
    lines = [MAGIC, f"world_size {len(entries)}", f"master_addr {entries[0].node}",
             f"master_port {master_port(placement_id)}", f"placement_id {placement_id}",
             f"tp {par.tp}", f"pp {par.pp}", f"dp {par.dp}", *extra, f"order {order}",
             "# rank node local_rank tp pp dp" + (" cp" if cp else ""), "ranks"]
    lines += [f"{e.rank} {e.node} {e.local_rank} {e.tp} {e.pp} {e.dp}"
              + (f" {e.cp}" if cp else "") for e in entries]
    return "\n".join(lines) + "\n"


def write_files(directory: Path, placement: Placement, placement_id: str,
                order: str = "tp-dp-pp", *, stem: str | None = None,
                parallelism: Parallelism | None = None) -> tuple[Path, Path]:
    """Write the rank-order file and a SLURM_HOSTFILE (one node per rank, in rank order);
    returns their paths, named ``<stem>`` (default: the placement id); ``parallelism`` as for
    :func:`rank_entries`. Written to a temporary
    name and renamed, readable by everyone (they hold no secret and the job may run as
    another account that shares the user's files)."""
    if not re.fullmatch(r"[0-9a-f]{8,64}", placement_id):
        raise ArnoldError(f"bad placement id {placement_id!r}")
    name = stem or placement_id
    if not re.fullmatch(r"[0-9a-z]{1,64}", name):
        raise ArnoldError(f"bad rank file name {name!r}")
    entries = rank_entries(placement, order, parallelism)
    directory.mkdir(parents=True, exist_ok=True)
    rankfile = directory / f"{name}.rankorder"
    hostfile = directory / f"{name}.hosts"
    for path, text in ((rankfile, render(entries, placement, placement_id, order, parallelism)),
                       (hostfile, "".join(f"{e.node}\n" for e in entries))):
        write_atomically(path, text)
    return rankfile, hostfile


def parse(text: str) -> tuple[dict[str, str], list[RankEntry]]:
    """Read a rank-order file back (for people and tests; the plugin has its own C parser)."""
    lines = text.splitlines()
    if not lines or lines[0] != MAGIC:
        raise ArnoldError(f"not an {MAGIC} file")
    header: dict[str, str] = {}
    entries: list[RankEntry] = []
    in_ranks = False
    for line in lines[1:]:
        if line.startswith("#"):
            continue
        if not in_ranks:
            if line == "ranks":
                in_ranks = True
                continue
            key, _, value = line.partition(" ")
            header[key] = value
            continue
        r, node, local, tp, pp, dp, *cp = line.split()
        entries.append(RankEntry(int(r), node, int(local), int(tp), int(pp), int(dp),
                                 int(cp[0]) if cp else 0))
    return header, entries
