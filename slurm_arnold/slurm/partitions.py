"""Partitions: the default one, and the topology.yaml topology a partition is scheduled on
(``scontrol show partition --oneliner``, every version)."""

from __future__ import annotations

from slurm_arnold.slurm.common import parse_oneliner
from slurm_arnold.slurm.runner import Runner


def default_partition(runner: Runner) -> str | None:
    """The cluster's default partition, if one is set."""
    out = runner.run(["scontrol", "show", "partition", "--oneliner"]).stdout
    for line in out.splitlines():
        f = parse_oneliner(line)
        if f.get("Default") == "YES":
            return f.get("PartitionName")
    return None


def partition_topology(runner: Runner, partition: str) -> str | None:
    """The topology.yaml topology ``partition`` uses (its ``Topology=``), None where the
    partition names none (every partition before Slurm 25.05)."""
    out = runner.run(["scontrol", "show", "partition", partition, "--oneliner"]).stdout
    for line in out.splitlines():
        f = parse_oneliner(line)
        if f.get("PartitionName") == partition:
            return f.get("Topology") or None
    return None
