"""``--from-job``: which stage boundaries of a placed job cross minipods, and what that costs.

A boundary ``i`` (stage ``i`` to ``i + 1``) is a cross link when, in any pipeline replica of the
job's placement, the two stages' nodes sit in different minipods: its messages then go over the
core tier, whose latency and bandwidth (over its oversubscription) come from the site config.
Links inside a minipod are taken as free, like the model's non-cross links.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from site_config import NetworkTiers
from slurm_arnold.errors import ArnoldError
from slurm_arnold.state import StateDB
from slurm_arnold.topology import Topology


@dataclass(frozen=True)
class JobLinks:
    """A job's pipeline as the scheduler sees it: its shape, which boundaries cross minipods,
    and what a message pays on those (latency, seconds per byte)."""

    stages: int
    tp: int
    dp: int
    gpus_per_node: int
    cross_links: frozenset[int]
    latency_seconds: float
    seconds_per_byte: float


def links_from_job(db: StateDB, job_id: int, topology: Topology,
                   network: NetworkTiers) -> JobLinks:
    """The shape and cross links of Slurm job ``job_id`` (submitted through arnold-sbatch)."""
    record = db.job(job_id)
    if record is None:
        raise ArnoldError(f"job {job_id} was not submitted through arnold-sbatch (not in "
                          f"{db.path}); give --cross-links instead")
    spec = json.loads(record["spec"] or "{}")
    placement = json.loads(record["placement"] or "{}")
    assignment = placement.get("assignment") or []
    pp = int(spec.get("pp") or 0)
    if not assignment or pp < 1:
        raise ArnoldError(f"job {job_id} has no recorded placement; give --cross-links instead")
    where: dict[tuple[int, int], set[str]] = {}
    for entry in assignment:
        node = entry["node"]
        if node not in topology.nodes:
            raise ArnoldError(f"job {job_id}'s node {node} is not in the topology; is this the "
                              "cluster it ran on?")
        where.setdefault((int(entry["dp"]), int(entry["pp"])), set()).add(
            topology.minipod_of(node))
    cross = set()
    for (dp, stage), pods in where.items():
        if stage + 1 < pp and len(pods | where.get((dp, stage + 1), set())) > 1:
            cross.add(stage)
    core = network.core
    bytes_per_s = core.bandwidth_gbps * 1e9 / 8 / core.oversubscription
    return JobLinks(pp, int(spec.get("tp") or 1), int(spec.get("dp") or 1),
                    int(spec.get("gpus_per_node") or 8), frozenset(cross),
                    core.latency_us * 1e-6, 1.0 / bytes_per_s)
