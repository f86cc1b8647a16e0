"""Nodes: ``sinfo --json`` (22.05, v0.0.38), ``scontrol show nodes --json`` (24.11 to 26.05,
v0.0.42 to v0.0.45) or ``scontrol show node --oneliner`` (every version)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slurm_arnold.slurm.common import parse_features, parse_gpu_count, parse_oneliner, split_state
from slurm_arnold.slurm.runner import Runner

# Node states in which a node is down or being emptied; a node with any of them is not free.
UNAVAILABLE_FLAGS = frozenset(
    {"DRAIN", "DRAINING", "DRAINED", "DOWN", "FAIL", "FAILING", "NOT_RESPONDING",
     "MAINTENANCE", "MAINT", "POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN", "POWERING_UP",
     "REBOOT_REQUESTED", "REBOOT_ISSUED", "INVALID_REG", "FUTURE", "UNKNOWN", "PLANNED",
     "COMPLETING"}
)


@dataclass(frozen=True)
class NodeInfo:
    """One node as slurmctld sees it."""

    name: str
    state: str  # base state, upper case: IDLE, MIXED, ALLOCATED, DOWN, ...
    flags: frozenset[str]
    partitions: tuple[str, ...]
    gpus_total: int
    gpus_used: int
    features: frozenset[str] = frozenset()

    @property
    def gpus_free(self) -> int:
        """GPUs not allocated to a job (0 when the node is unavailable)."""
        if self.flags & UNAVAILABLE_FLAGS or self.state in UNAVAILABLE_FLAGS:
            return 0
        return max(0, self.gpus_total - self.gpus_used)

    @property
    def state_text(self) -> str:
        """State with its flags, as ``sinfo -O StateComplete`` prints it (lower case)."""
        return "+".join([self.state.lower(), *sorted(f.lower() for f in self.flags)])


def nodes_from_json(doc: Mapping[str, Any]) -> list[NodeInfo]:
    """Nodes of ``sinfo --json`` (v0.0.38: a state word, ``state_flags``, features as text)
    or ``scontrol show nodes --json`` (v0.0.42 to v0.0.45: the state as a list of words,
    features as a list)."""
    out = []
    for n in doc["nodes"]:
        state = n.get("state") or "UNKNOWN"
        words = [str(w) for w in state] if isinstance(state, list) else [str(state)]
        base, flags = split_state("+".join(words or ["UNKNOWN"]))
        features = n.get("active_features")
        out.append(NodeInfo(
            name=n["name"],
            state=base,
            flags=flags | frozenset(str(f).upper() for f in n.get("state_flags") or []),
            partitions=tuple(n.get("partitions") or ()),
            gpus_total=parse_gpu_count(n.get("gres")),
            gpus_used=parse_gpu_count(n.get("gres_used")),
            features=parse_features(",".join(features) if isinstance(features, list)
                                  else features),
        ))
    return out


def nodes_from_scontrol(text: str) -> list[NodeInfo]:
    """Nodes of ``scontrol show node --oneliner``."""
    out = []
    for line in text.splitlines():
        if not line.startswith("NodeName="):
            continue
        f = parse_oneliner(line)
        base, flags = split_state(f.get("State", "UNKNOWN"))
        used = re.search(r"gres/gpu=(\d+)", f.get("AllocTRES", ""))
        out.append(NodeInfo(
            name=f["NodeName"],
            state=base,
            flags=flags,
            partitions=tuple(p for p in f.get("Partitions", "").split(",") if p),
            gpus_total=parse_gpu_count(f.get("Gres")),
            gpus_used=int(used.group(1)) if used else 0,
            features=parse_features(f.get("ActiveFeatures")),
        ))
    return out


def read_nodes(runner: Runner) -> list[NodeInfo]:
    """Every node with its state and GPUs, in this Slurm's JSON where we read it, else text."""
    # 26.05's sinfo --json groups nodes alike; its scontrol lists each one.
    doc = runner.json_doc(["sinfo"] if runner.json_family == "v0.0.38"
                          else ["scontrol", "show", "nodes"])
    if doc is not None:
        return nodes_from_json(doc)
    return nodes_from_scontrol(runner.run(["scontrol", "show", "node", "--oneliner"]).stdout)
