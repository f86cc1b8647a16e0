"""NEST's own solver input: read it, price layouts with NEST's costs, and search them exactly.

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
import time
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


# ----------------------------------------------------------------------------- NEST's costs

def level_between(inst: NestInstance, dev_a: int, dev_b: int) -> int:
    """The lowest network level whose switch joins two devices (NEST's ``getLoadIdx``); the top
    level when none does (more devices than the levels describe: NEST's program reads out of
    bounds there)."""
    a, b = dev_a, dev_b
    for level, fan in enumerate(inst.devices_per_level):
        a, b = a // fan, b // fan
        if a == b:
            return level
    return inst.levels - 1


def _transfer(inst: NestInstance, nbytes: float, level: int) -> float:
    # NEST: one hop at level 0, up and down (twice) above it.
    if level == 0:
        return nbytes / inst.bws[0] + inst.latency[0]
    return 2 * (nbytes / inst.bws[level] + inst.latency[level])


def stage_load(inst: NestInstance, g: NestGraph, first: int, end: int, fw_level: int,
               bw_level: int, recompute: bool) -> float:
    """One micro-batch's forward plus backward latency of the stage holding positions
    ``first..end-1`` (NEST's ``getLoadOfStageForA``, in its order of operations): transfers
    into the stage at ``fw_level``, out of it at ``bw_level``; with ``recompute`` the backward
    starts after a recomputation chain (NEST prices it with the backward latencies)."""
    finish: dict[int, float] = {}
    fw_pass = 0.0
    for v in range(first, end):
        start = 0.0
        for u, nbytes in g.incoming[v]:
            start = max(start, finish[u] if u in finish else _transfer(inst, nbytes, fw_level))
        finish[v] = start + g.fw[v]
        fw_pass = finish[v]
    if not recompute:
        finish = {}
        bw_pass = 0.0
        for v in range(end - 1, first - 1, -1):
            start = 0.0
            for w, nbytes in g.outgoing[v]:
                start = max(start, finish[w] if w in finish
                            else _transfer(inst, nbytes, bw_level))
            finish[v] = start + g.bw[v]
            bw_pass = finish[v]
        return fw_pass + bw_pass
    finish = {}
    recomputed = 0.0
    for v in range(first, end):
        start = 0.0
        for u, _ in g.incoming[v]:
            if u in finish:
                start = max(start, finish[u])
        finish[v] = start + g.bw[v]
        recomputed = finish[v]
    finish = {}
    entire = 0.0
    for v in range(end - 1, first - 1, -1):
        start = recomputed
        for w, nbytes in g.outgoing[v]:
            start = max(start, finish[w] if w in finish else _transfer(inst, nbytes, bw_level))
        finish[v] = start + g.bw[v]
        entire = finish[v]
    return fw_pass + entire


def stage_params(g: NestGraph, first: int, end: int) -> float:
    """Parameter bytes of the stage (NEST sums them node by node)."""
    total = 0.0
    for v in range(first, end):
        total += g.params[v]
    return total


def max_position(inst: NestInstance, g: NestGraph, first: int, end: int) -> int:
    """The largest ``s`` (the stage's position counted from the last stage, 1 = last) at which
    the stage fits in memory under 1F1B: NEST's ``const + (s - 1) x stash <= memory``; 0 when it
    never fits."""
    params = stage_params(g, first, end)
    optimizer = (2 * params + 2 * params) + 2 * params if inst.adam else 0.0
    activations = 0.0
    for v in range(first, end):
        activations += g.activations[v]
    const = 2 * params + optimizer + activations
    if inst.recompute:
        stash = 0.0
        for v in range(first, end):
            for u, nbytes in g.incoming[v]:
                if not first <= u < end:
                    stash += nbytes
    else:
        stash = activations
    if const + (inst.max_devices - 1) * stash <= inst.max_memory:
        return inst.max_devices
    if const > inst.max_memory:
        return 0
    return 1 + math.floor((inst.max_memory - const) / stash)


def allreduce_cost(inst: NestInstance, dp: int, params: float, spacing: int) -> float:
    """NEST's data-parallel synchronisation of ``params`` bytes over ``dp`` replicas placed
    ``spacing`` devices apart: halving-doubling under the lowest common switch, then the full
    data up and down each level above (``getDataParallelResyncCostTree``)."""
    ids = list(range(0, dp * spacing, spacing))
    top = inst.levels
    lowered = list(ids)
    for level, fan in enumerate(inst.devices_per_level):
        lowered = [i // fan for i in lowered]
        if all(i == lowered[0] for i in lowered):
            top = level + 1
            break
    total = 0.0
    for i in range(int(math.log2(len(ids)))):
        data = params / math.pow(2, i)
        total += inst.latency[0] + (1 / inst.bws_dp[0]) * data
    lower = 0.0
    for level in range(1, top):
        total += (2 * (inst.latency[level] + (1 / inst.bws_dp[level]) * params)) + lower
        lower += total
    return total


def _boundary_levels(inst: NestInstance, stages: int, a: int) -> list[int]:
    """levels[r]: the level between stage r and stage r + 1, stages counted from the last one,
    which sits on devices 0..a-1 (NEST's skeleton places the last stage first)."""
    return [level_between(inst, (r + 1) * a, r * a) for r in range(stages - 1)]


def price(inst: NestInstance, layout: NestLayout) -> tuple[float, float]:
    """(time per batch, bottleneck load) of a layout in NEST's units; ``inf`` when a stage does
    not fit in memory at its position, or the layout needs more devices than the file has."""
    g = inst.graphs[layout.tp]
    a = layout.devices_per_stage
    stages = layout.pp
    if stages * a * layout.dp > inst.max_devices or layout.dp > inst.mbs_in_batch:
        return INFEASIBLE, INFEASIBLE
    levels = _boundary_levels(inst, stages, a)
    bottleneck = 0.0
    for k in range(stages):
        r = stages - 1 - k  # from the last stage
        first, end = layout.cuts[k], layout.cuts[k + 1]
        if max_position(inst, g, first, end) < r + 1:
            return INFEASIBLE, INFEASIBLE
        fw_level = levels[r] if r < stages - 1 else 0
        bw_level = levels[r - 1] if r > 0 else 0
        bottleneck = max(bottleneck, stage_load(inst, g, first, end, fw_level, bw_level,
                                                inst.recompute and r > 0))
    return _time(inst, layout.dp, stages, a, bottleneck,
                 stage_params(g, layout.cuts[0], layout.cuts[1])), bottleneck


def _time(inst: NestInstance, dp: int, stages: int, a: int, bottleneck: float,
          first_params: float) -> float:
    per_pipeline = -(-inst.mbs_in_batch // dp)
    return bottleneck * (per_pipeline + stages - 1) \
        + allreduce_cost(inst, dp, first_params, stages * a)


# ----------------------------------------------------------------------------- the search

def search_nest(inst: NestInstance) -> NestPlan:
    """The layout with the smallest time per batch over NEST's space (every TP width, degree,
    stage count and contiguous cut), priced by :func:`price`."""
    started = time.perf_counter()
    best: tuple[float, float, NestLayout] | None = None
    priced = 0
    for width, g in inst.graphs.items():
        a = width * inst.ep * inst.cp
        max_stages = min(inst.max_devices, g.size, inst.max_devices // a)
        if max_stages < 1:
            continue
        found, count = _search_width(inst, g, width, a, max_stages)
        priced += count
        if found is not None and (best is None or found[0] < best[0]):
            best = found
    if best is None:
        raise ArnoldError("no layout fits in memory on NEST's costs without ZeRO (NEST's "
                          "program would try its ZeRO fallback, priced by its own network "
                          "simulator, which this search does not model)")
    layout = best[2]
    # Report the price in NEST's order of operations (the search compared the same numbers).
    exact, exact_bottleneck = price(inst, layout)
    return NestPlan(layout=layout, time_per_batch=exact, bottleneck=exact_bottleneck,
                    search_seconds=time.perf_counter() - started, layouts_priced=priced)


def _search_width(inst: NestInstance, g: NestGraph, width: int, a: int,
                  max_stages: int) -> tuple[tuple[float, float, NestLayout] | None, int]:
    n = g.size
    levels = _boundary_levels(inst, max_stages, a)
    fits = [[0] * (n + 1) for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n + 1):
            fits[i][j] = max_position(inst, g, i, j)
    loads: dict[tuple[int, int, int, int, bool], float] = {}

    def load(i: int, j: int, r: int, stages: int) -> float:
        fw_level = levels[r] if r < stages - 1 else 0
        bw_level = levels[r - 1] if r > 0 else 0
        # The first stage receives nothing: its forward level never matters.
        if i == 0:
            fw_level = 0
        if j == n:
            bw_level = 0
        key = (i, j, fw_level, bw_level, inst.recompute and r > 0)
        if key not in loads:
            loads[key] = stage_load(inst, g, i, j, fw_level, bw_level, key[4])
        return loads[key]

    # suffix[r][i]: the smallest bottleneck of positions i.. on the last r + 1 stages (the
    # stage holding i is an interior one: its forward level is levels[r]), and its cut.
    suffix: list[list[float]] = []
    cut_at: list[list[int]] = []
    for r in range(max_stages - 1):
        row = [INFEASIBLE] * (n + 1)
        arg = [-1] * (n + 1)
        for i in range(1, n):
            for j in range(i + 1, n + 1):
                if fits[i][j] < r + 1:
                    continue
                tail = 0.0 if (r == 0 and j == n) else (suffix[r - 1][j] if r > 0 else INFEASIBLE)
                if tail == INFEASIBLE:
                    continue
                value = max(load(i, j, r, max_stages), tail)
                if value < row[i]:
                    row[i], arg[i] = value, j
        suffix.append(row)
        cut_at.append(arg)

    best: tuple[float, float, NestLayout] | None = None
    priced = 0
    max_dp = min(inst.max_devices, inst.mbs_in_batch)
    for stages in range(1, max_stages + 1):
        r = stages - 1
        firsts: list[tuple[float, int]] = []
        for e in range(1, n + 1):
            if fits[0][e] < stages:
                continue
            tail = 0.0 if stages == 1 and e == n else (
                suffix[r - 1][e] if stages > 1 and e < n else INFEASIBLE)
            if tail == INFEASIBLE:
                continue
            firsts.append((max(load(0, e, r, stages), tail), e))
        if not firsts:
            continue
        firsts.sort()
        for dp in range(1, min(max_dp, inst.max_devices // (stages * a)) + 1):
            per_pipeline = -(-inst.mbs_in_batch // dp)
            multiplier = per_pipeline + stages - 1
            for bottleneck, e in firsts:
                # The all-reduce only adds: no later first stage can beat the best any more.
                if best is not None and bottleneck * multiplier >= best[0]:
                    break
                total = _time(inst, dp, stages, a, bottleneck, stage_params(g, 0, e))
                priced += 1
                if best is None or total < best[0]:
                    best = (total, bottleneck, NestLayout(width, dp, _cuts(cut_at, e, r, n), a))
    return best, priced


def _cuts(cut_at: list[list[int]], first_end: int, r: int, n: int) -> tuple[int, ...]:
    cuts = [0, first_end]
    position = first_end
    for row in range(r - 1, -1, -1):
        position = cut_at[row][position]
        cuts.append(position)
    if cuts[-1] != n:
        raise AssertionError("cut reconstruction did not end at the last node")
    return tuple(cuts)


def plan_doc(inst: NestInstance, plan: NestPlan) -> dict[str, Any]:
    """The plan as ``arnold plan --nest-input --json`` prints it (NEST's key names where NEST
    has one)."""
    lay = plan.layout
    g = inst.graphs[lay.tp]
    stages = [{"nodes": list(g.ids[lay.cuts[k]:lay.cuts[k + 1]]),
               "devicesForStage": lay.devices_per_stage} for k in range(lay.pp)]
    return {
        "tp": lay.tp, "pp": lay.pp, "dp": lay.dp,
        "ep": inst.ep, "cp": inst.cp,
        "stages": stages,
        "nodes_per_stage": [lay.cuts[k + 1] - lay.cuts[k] for k in range(lay.pp)],
        "finalTimePerBatch": plan.time_per_batch,
        "bottleneck": plan.bottleneck,
        "throughput": inst.mbs_in_batch / plan.time_per_batch,
        "devices_used": lay.pp * lay.devices_per_stage * lay.dp,
        "max_devices": inst.max_devices,
        "tp_widths": sorted(inst.graphs),
        "layouts_priced": plan.layouts_priced,
        "search_seconds": round(plan.search_seconds, 4),
        "units": "NEST's: its estimator's per-layer latency units",
    }
