"""NEST's own solver input, read and checked (``nest_costs`` prices and searches it).

NEST (Wang et al.) writes, from ``nest.py``, the input of its C++ device-placement program: per
TP width a layer graph whose nodes carry forward/backward latencies (its estimator's units),
activation and parameter bytes, and whose edges carry message bytes; per network level a
bandwidth, a latency and a fan-out; the memory per device, micro-batches per batch, whether
activations are recomputed, the optimizer. This module reads that file and answers NEST's own
question on NEST's own costs, so the two searches can be compared on identical numbers.

The costs follow NEST's program (``device_placement.cpp`` in scai-tech/Nest), as docs/plan.md
sets out: a stage's load is its forward chain (started by the incoming message's transfer)
plus its backward chain (started by the outgoing gradient's), with recomputation a second
backward-latency chain instead of the stored forward; a stage fits when
``2 x parameters (+ 6 x parameters for Adam) + activations + (s - 1) x stash`` fits, ``s`` its
position counted from the last stage; the time per batch is
``bottleneck x (ceil(micro-batches / d) + stages - 1)`` plus the first stage's data-parallel
all-reduce on NEST's hierarchical model. Stages sit on consecutive devices, the last stage
first (NEST's skeleton), so a stage boundary's network level follows from the stage index.

The search is exact over NEST's space (every TP width in the file, every data-parallel degree,
every stage count, every contiguous cut): a dynamic program over (stage from the end, first
layer of the suffix), then every first stage and every degree priced in full. Floating-point
operations run in NEST's order, so a layout priced here costs what NEST's program says.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurm_arnold.errors import ArnoldError

INFEASIBLE = float("inf")
# NEST's program refuses more devices than this (DEVICES_LIMIT in device_placement.cpp).
DEVICES_LIMIT = 10_000


class NestInputError(ArnoldError):
    """The file is not NEST's solver input, or is one NEST's own program would refuse."""

    def __init__(self, source: str, problem: str) -> None:
        super().__init__(f"{source}: {problem}")


@dataclass(frozen=True)
class NestGraph:
    """One TP width's layer chain, in execution order (NEST renumbers it topologically)."""

    ids: tuple[int, ...]  # the file's node ids, by position
    fw: tuple[float, ...]
    bw: tuple[float, ...]
    params: tuple[float, ...]
    activations: tuple[float, ...]
    incoming: tuple[tuple[tuple[int, float], ...], ...]  # position -> ((source position, bytes),)
    outgoing: tuple[tuple[tuple[int, float], ...], ...]

    @property
    def size(self) -> int:
        """Nodes in the chain."""
        return len(self.ids)


@dataclass(frozen=True)
class NestInstance:
    """NEST's solver input, checked as NEST's program checks it."""

    max_memory: float
    max_devices: int
    bws: tuple[float, ...]  # per level, capped by the levels below (what NEST's pipeline sends see)
    bws_dp: tuple[float, ...]  # per level, as given (what NEST's all-reduce sees)
    latency: tuple[float, ...]
    devices_per_level: tuple[int, ...]
    frequency: float
    mbs_in_batch: int
    recompute: bool
    adam: bool
    ep: int
    cp: int
    graphs: dict[int, NestGraph]
    baselines: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def levels(self) -> int:
        """Network levels."""
        return len(self.bws)


@dataclass(frozen=True)
class NestLayout:
    """A layout in NEST's terms: TP width, data-parallel degree, and the cut of the chain."""

    tp: int
    dp: int
    cuts: tuple[int, ...]  # stage boundaries as positions: 0 = c0 < c1 < ... < cS = nodes
    devices_per_stage: int

    @property
    def pp(self) -> int:
        """Pipeline stages."""
        return len(self.cuts) - 1


@dataclass(frozen=True)
class NestPlan:
    """The searched layout, its time per batch in NEST's units, and what the search cost."""

    layout: NestLayout
    time_per_batch: float
    bottleneck: float
    search_seconds: float
    layouts_priced: int


# ----------------------------------------------------------------------------- reading

_REQUIRED = ("maxMemoryPerDevice", "maxDevices", "bandwidth", "bws", "latency_per_level",
             "devices_per_level", "frequency", "mbsInBatch", "nodes", "edges", "ep_degree",
             "cp_degree", "activationRecomputation", "optimizerAlgorithm")
_NODE_KEYS = ("id", "parameterSize", "activationSize", "optimalLatencyFw", "optimalLatencyBw")
_EDGE_KEYS = ("sourceId", "destId", "communicationCost")


def read_nest_input(path: str | Path) -> NestInstance:
    """Read NEST's device-placement input from ``path``; :class:`NestInputError` (one line)
    when it is not JSON, not NEST's input, or an input NEST's program would refuse."""
    source = str(path)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise NestInputError(source, f"cannot read it ({exc.strerror}); give the JSON file "
                                     "NEST's nest.py wrote") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NestInputError(source, f"not JSON ({exc.msg} at line {exc.lineno}); give the "
                                     "file NEST's nest.py wrote") from None
    return parse_nest_input(doc, source)


def parse_nest_input(doc: Any, source: str = "NEST input") -> NestInstance:
    """Check and convert an already-parsed NEST input document (see :func:`read_nest_input`)."""
    if not isinstance(doc, dict):
        raise NestInputError(source, "not NEST's solver input: the top level is not an object")
    missing = [key for key in _REQUIRED if key not in doc]
    if missing:
        raise NestInputError(source, f"not NEST's solver input: no {', '.join(missing)} "
                                     "(the keys nest.py writes for device_placement)")

    def number(key: str, value: Any, *, positive: bool = True) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or value < 0 or (positive and value <= 0):
            raise NestInputError(source, f"{key} is {value!r}; it must be a "
                                         f"{'positive' if positive else 'non-negative'} number")
        return float(value)

    def whole(key: str, value: Any, low: int, high: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or value != int(value) or value < low \
                or (high is not None and value > high):
            span = f"{low}..{high}" if high is not None else f">= {low}"
            raise NestInputError(source, f"{key} is {value!r}; it must be a whole number {span}")
        return int(value)

    def numbers(key: str, *, positive: bool = True) -> list[float]:
        value = doc[key]
        if not isinstance(value, list) or not value:
            raise NestInputError(source, f"{key} must be a non-empty list, one entry per level")
        return [number(f"{key}[{i}]", v, positive=positive) for i, v in enumerate(value)]

    max_devices = whole("maxDevices", doc["maxDevices"], 1, DEVICES_LIMIT)
    max_memory = number("maxMemoryPerDevice", doc["maxMemoryPerDevice"])
    number("bandwidth", doc["bandwidth"])
    bws_dp = numbers("bws")
    latency = numbers("latency_per_level", positive=False)
    fan_out = doc["devices_per_level"]
    if not isinstance(fan_out, list):
        raise NestInputError(source, "devices_per_level must be a list, one entry per level")
    per_level = [whole(f"devices_per_level[{i}]", v, 1) for i, v in enumerate(fan_out)]
    if not len(bws_dp) == len(latency) == len(per_level):
        raise NestInputError(source, f"bws, latency_per_level and devices_per_level have "
                                     f"{len(bws_dp)}, {len(latency)} and {len(per_level)} "
                                     "entries; give one per network level in each")
    capped = list(bws_dp)
    for i in range(1, len(capped)):
        capped[i] = min(capped[i], capped[i - 1])
    optimizer = doc["optimizerAlgorithm"]
    if optimizer not in ("SGD", "Adam"):
        raise NestInputError(source, f"optimizerAlgorithm is {optimizer!r}; NEST knows SGD "
                                     "and Adam")
    if not isinstance(doc["activationRecomputation"], bool):
        raise NestInputError(source, "activationRecomputation must be true or false")
    graphs = _graphs(doc["nodes"], doc["edges"], source, number)
    baselines = doc.get("baselines") or {}
    if not isinstance(baselines, dict):
        raise NestInputError(source, "baselines must be an object of name -> {p, t, d}")
    return NestInstance(
        max_memory=max_memory, max_devices=max_devices, bws=tuple(capped),
        bws_dp=tuple(bws_dp), latency=tuple(latency), devices_per_level=tuple(per_level),
        frequency=number("frequency", doc["frequency"]),
        mbs_in_batch=whole("mbsInBatch", doc["mbsInBatch"], 1),
        recompute=doc["activationRecomputation"], adam=optimizer == "Adam",
        ep=whole("ep_degree", doc["ep_degree"], 1), cp=whole("cp_degree", doc["cp_degree"], 1),
        graphs=graphs, baselines=baselines)


def _graphs(nodes_doc: Any, edges_doc: Any, source: str, number: Any) -> dict[int, NestGraph]:
    """The per-TP-width chains, checked as NEST checks them (same nodes and edges for every
    width, a DAG) plus what its program needs to run at all (no branching)."""
    if not isinstance(nodes_doc, dict) or not nodes_doc:
        raise NestInputError(source, "nodes must be an object of TP width -> node list")
    if not isinstance(edges_doc, dict) or set(edges_doc) != set(nodes_doc):
        raise NestInputError(source, "nodes and edges must list the same TP widths")
    graphs: dict[int, NestGraph] = {}
    reference: tuple[set[int], set[tuple[int, int]]] | None = None
    for width_text, node_list in nodes_doc.items():
        try:
            width = int(width_text)
        except ValueError:
            raise NestInputError(source, f"nodes key {width_text!r} is not a TP width") from None
        if not 1 <= width <= DEVICES_LIMIT:
            raise NestInputError(source, f"TP width {width} is out of range 1..{DEVICES_LIMIT}")
        if not isinstance(node_list, list) or not node_list:
            raise NestInputError(source, f"nodes[{width_text}] must be a non-empty list")
        table: dict[int, dict[str, float]] = {}
        for k, node in enumerate(node_list):
            where = f"nodes[{width_text}][{k}]"
            if not isinstance(node, dict) or any(key not in node for key in _NODE_KEYS):
                raise NestInputError(source, f"{where} must have {', '.join(_NODE_KEYS)}")
            node_id = node["id"]
            if isinstance(node_id, bool) or not isinstance(node_id, int):
                raise NestInputError(source, f"{where}.id is {node_id!r}; ids are whole numbers")
            if node_id in table:
                raise NestInputError(source, f"node id {node_id} appears twice in "
                                             f"nodes[{width_text}]")
            table[node_id] = {key: number(f"{where}.{key}", node[key], positive=False)
                              for key in _NODE_KEYS[1:]}
        edge_list = edges_doc[width_text]
        if not isinstance(edge_list, list):
            raise NestInputError(source, f"edges[{width_text}] must be a list")
        edges: dict[tuple[int, int], float] = {}
        for k, edge in enumerate(edge_list):
            where = f"edges[{width_text}][{k}]"
            if not isinstance(edge, dict) or any(key not in edge for key in _EDGE_KEYS):
                raise NestInputError(source, f"{where} must have {', '.join(_EDGE_KEYS)}")
            u, v = edge["sourceId"], edge["destId"]
            if any(isinstance(x, bool) or not isinstance(x, int) for x in (u, v)) \
                    or u not in table or v not in table:
                raise NestInputError(source, f"{where} joins {u!r} and {v!r}, not both nodes "
                                             f"of nodes[{width_text}]")
            if u == v or (u, v) in edges:
                raise NestInputError(source, f"{where} ({u} -> {v}) is a self-loop or a "
                                             "parallel edge; contract it")
            edges[(u, v)] = number(f"{where}.communicationCost", edge["communicationCost"],
                                   positive=False)
        shape = (set(table), set(edges))
        if reference is None:
            reference = shape
        elif shape != reference:
            raise NestInputError(source, f"TP width {width} has other nodes or edges than the "
                                         "first width; every width must describe the same graph")
        graphs[width] = _chain(table, edges, source, width)
    return dict(sorted(graphs.items()))


def _chain(table: dict[int, dict[str, float]], edges: dict[tuple[int, int], float],
           source: str, width: int) -> NestGraph:
    indegree = {node: 0 for node in table}
    for _, v in edges:
        indegree[v] += 1
    ready = [node for node in table if indegree[node] == 0]
    if len(ready) != 1:
        raise NestInputError(source, f"TP width {width}: {len(ready)} nodes without a producer; "
                                     "NEST's program takes one chain of layers (no branching)")
    succ: dict[int, list[int]] = {node: [] for node in table}
    for u, v in edges:
        succ[u].append(v)
    order: list[int] = []
    while ready:
        node = ready.pop()
        order.append(node)
        for nxt in succ[node]:
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                ready.append(nxt)
        if len(ready) > 1:
            raise NestInputError(source, f"TP width {width}: the layer graph branches after "
                                         f"node {node}; NEST's program takes one chain")
    if len(order) != len(table):
        raise NestInputError(source, f"TP width {width}: the layer graph has a cycle")
    pos = {node: i for i, node in enumerate(order)}
    incoming: list[list[tuple[int, float]]] = [[] for _ in order]
    outgoing: list[list[tuple[int, float]]] = [[] for _ in order]
    for (u, v), cost in edges.items():
        incoming[pos[v]].append((pos[u], cost))
        outgoing[pos[u]].append((pos[v], cost))
    for i in range(1, len(order)):
        if all(u != i - 1 for u, _ in incoming[i]):
            raise NestInputError(source, f"TP width {width}: no edge from node {order[i - 1]} "
                                         f"to node {order[i]}; NEST's program takes one chain")
    return NestGraph(
        ids=tuple(order), fw=tuple(table[n]["optimalLatencyFw"] for n in order),
        bw=tuple(table[n]["optimalLatencyBw"] for n in order),
        params=tuple(table[n]["parameterSize"] for n in order),
        activations=tuple(table[n]["activationSize"] for n in order),
        incoming=tuple(tuple(sorted(e)) for e in incoming),
        outgoing=tuple(tuple(sorted(e)) for e in outgoing))
