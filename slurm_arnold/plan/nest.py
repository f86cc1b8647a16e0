"""NEST's dynamic program over pipeline cuts: the best layers per stage for one layout template.

Wang et al. (NEST) place a model backwards, from the last layer to the first:

    dp[l][D][k][s] = min over cuts D' of D, min over a of
                     max(dp[l'][D'][k - a][s - 1], load_l(D minus D', a, s))

the bottleneck over stages of a suffix ``D`` of the layers on ``k`` devices in ``s`` stages,
``l`` the network level towards the producer not yet placed. Here a template fixes TP, CP, EP,
DP (so every stage has ``a = k/s`` devices, as Megatron needs), the rank order, micro-batch,
ZeRO stage and recomputation; the rank order fixes the level of every stage boundary
(``cost.group_levels``), so ``l`` is known from the stage index and the state reduces to
(stage, first layer of the suffix). ``load`` is the stage's slot (``StageModel.slot``), and a
cut whose stage does not fit in memory at its 1F1B position is infeasible inside the recursion,
not checked afterwards.

What it minimises is the pipeline term of the cost model exactly: ``(m - 1) x max slot +
sum of slots``, where the sum does not depend on the cut (every layer and message is counted
once wherever it goes), so minimising the bottleneck is minimising the pipeline. Among cuts with
the same bottleneck it keeps stages as equal as it can (less DP synchronisation on the largest).
"""

from __future__ import annotations

import functools

import numpy as np

from slurm_arnold.plan.cost import StageModel

INFEASIBLE = float("inf")


def best_cut(sm: StageModel, layers: int, memory_limit: float) -> tuple[float, tuple[int, ...]]:
    """(the smallest bottleneck slot, layers per stage) over every cut of ``layers`` layers into
    ``sm.pp`` non-empty stages that fits in ``memory_limit`` bytes per GPU; ``(inf, ())`` when
    none fits.

    The recursion's answer (``recursion_cut``), found faster: a stage's slot and memory grow
    linearly with its layers, so for a bottleneck B stage k holds at most ``caps_k(B)`` layers
    (those whose slot is <= B and that fit), and a cut reaching B exists iff every cap is >= 1
    and they sum to at least ``layers``. The bottleneck is one stage's slot, so the answer is
    the smallest such candidate: one sorted search per stage over all candidates, O(p L log)
    against the recursion's O(p L^2)."""
    p = sm.pp
    if p > layers:
        return INFEASIBLE, ()
    slots = _stage_slots(sm, layers, memory_limit)
    candidates = np.unique(slots)
    candidates = candidates[np.isfinite(candidates)]
    if not candidates.size:
        return INFEASIBLE, ()
    # slots[k] rises with the layers (infeasible counts last), so a sorted search counts them.
    caps = np.stack([np.searchsorted(row, candidates, side="right") for row in slots])
    reach = (caps.min(axis=0) >= 1) & (caps.sum(axis=0) >= layers)
    if not reach.any():
        return INFEASIBLE, ()
    first = int(np.argmax(reach))
    value = float(candidates[first])
    balanced = _balanced(sm, layers, memory_limit, value)
    if balanced:
        return value, balanced
    cut, left = [], layers  # reached only if rounding defeats _balanced: fill stages in order
    for k in range(p):
        cut.append(int(min(caps[k, first], left - (p - k - 1))))
        left -= cut[-1]
    return value, tuple(cut)


def _stage_slots(sm: StageModel, layers: int, memory_limit: float) -> np.ndarray:
    """stages x layers: stage k's slot holding n = 1..layers layers, inf where they do not fit."""
    n = np.arange(1, layers + 1, dtype=float)
    out = np.empty((sm.pp, layers))
    for k in range(sm.pp):
        fits = n * _per_layer_bytes(sm, k) + sm.embedding_state_bytes[k] <= memory_limit
        out[k] = np.where(fits, n * sm.layer_seconds + sm.slot(k, 0), INFEASIBLE)
    return out


def recursion_cut(sm: StageModel, layers: int,
                  memory_limit: float) -> tuple[float, tuple[int, ...]]:
    """NEST's recursion itself, backwards over the stages (the module docstring): what
    ``best_cut`` must equal (tests compare them), O(p L^2)."""
    p = sm.pp
    if p > layers:
        return INFEASIBLE, ()
    slots = _stage_slots(sm, layers, memory_limit)
    # best[j]: the bottleneck of layers j.. on the stages after the current one.
    best = np.full(layers + 1, INFEASIBLE)
    best[layers] = -INFEASIBLE  # no layers left on no stages: neutral for max
    choice = np.zeros((p, layers + 1), dtype=np.int64)
    for k in range(p - 1, -1, -1):
        # after[j, i] = best[j + i + 1]: the rest when this stage takes i + 1 layers from j.
        padded = np.concatenate([best, np.full(layers, INFEASIBLE)])
        cost = np.maximum(slots[k][None, :], padded[_rest_index(layers)])
        take = np.argmin(cost, axis=1)
        best = cost[np.arange(layers + 1), take]
        choice[k] = take + 1
    value = float(best[0])
    if value == INFEASIBLE:
        return INFEASIBLE, ()
    balanced = _balanced(sm, layers, memory_limit, value)
    if balanced:
        return value, balanced
    cut, j = [], 0
    for k in range(p):
        cut.append(int(choice[k][j]))
        j += cut[-1]
    return value, tuple(cut)


@functools.cache
def _rest_index(layers: int) -> np.ndarray:
    """``[j, i] -> j + i + 1`` for j in 0..layers, i in 0..layers - 1: where, in ``best``
    padded by ``layers`` infeasible entries, the rest starts when a stage takes i + 1 layers
    from layer j (one gather per stage instead of a strided view)."""
    return np.arange(layers + 1)[:, None] + np.arange(1, layers + 1)[None, :]


def _per_layer_bytes(sm: StageModel, k: int) -> float:
    return sm.memory(k, 1) - sm.memory(k, 0)


def _balanced(sm: StageModel, layers: int, memory_limit: float,
              bottleneck: float) -> tuple[int, ...]:
    """A cut reaching ``bottleneck`` whose stages are as equal as the bound allows: each stage
    takes an even share of what is left (rounded up), within what keeps it under the bound and
    in memory and what leaves the later stages placeable; ``()`` if rounding defeats it."""
    p = sm.pp
    tol = abs(bottleneck) * 1e-9
    caps = []
    for k in range(p):
        per = _per_layer_bytes(sm, k)
        by_time = int((bottleneck + tol - sm.slot(k, 0)) // sm.layer_seconds) \
            if sm.layer_seconds > 0 else layers
        room_bytes = memory_limit - sm.embedding_state_bytes[k]
        by_memory = layers if per <= 0 or room_bytes >= per * layers else int(room_bytes // per)
        caps.append(max(0, min(by_time, by_memory, layers)))
    # suffix capacity: the most layers stages k.. can take.
    room = [0] * (p + 1)
    for k in range(p - 1, -1, -1):
        room[k] = room[k + 1] + caps[k]
    out = []
    left = layers
    for k in range(p):
        stages_left = p - k
        share = -(-left // stages_left)
        need_after = stages_left - 1  # at least one layer for each later stage
        low = max(1, left - room[k + 1])
        high = min(caps[k], left - need_after)
        if low > high:
            return ()
        take = min(max(share, low), high)
        out.append(take)
        left -= take
    return tuple(out) if left == 0 else ()


def brute_force_cut(sm: StageModel, layers: int,
                    memory_limit: float) -> tuple[float, tuple[int, ...]]:
    """Every composition of ``layers`` into ``sm.pp`` parts (for tests on small cases)."""
    best: tuple[float, tuple[int, ...]] = (INFEASIBLE, ())

    def walk(k: int, left: int, acc: tuple[int, ...], worst: float) -> None:
        nonlocal best
        if k == sm.pp:
            if left == 0 and worst < best[0]:
                best = (worst, acc)
            return
        for n in range(1, left - (sm.pp - k - 1) + 1):
            if sm.memory(k, n) > memory_limit:
                continue
            walk(k + 1, left - n, (*acc, n), max(worst, sm.slot(k, n)))

    walk(0, layers, (), -INFEASIBLE)
    return best
