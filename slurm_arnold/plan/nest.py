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

import numpy as np

from slurm_arnold.plan.cost import StageModel

INFEASIBLE = float("inf")


def best_cut(sm: StageModel, layers: int, memory_limit: float) -> tuple[float, tuple[int, ...]]:
    """(the smallest bottleneck slot, layers per stage) over every cut of ``layers`` layers into
    ``sm.pp`` non-empty stages that fits in ``memory_limit`` bytes per GPU; ``(inf, ())`` when
    none fits."""
    p = sm.pp
    if p > layers:
        return INFEASIBLE, ()
    n = np.arange(1, layers + 1, dtype=float)
    # best[j]: the bottleneck of layers j.. on the stages after the current one.
    best = np.full(layers + 1, INFEASIBLE)
    best[layers] = -INFEASIBLE  # no layers left on no stages: neutral for max
    choice = np.zeros((p, layers + 1), dtype=np.int64)
    for k in range(p - 1, -1, -1):
        slot = (n * sm.layer_seconds + sm.slot(k, 0))
        fits = n * _per_layer_bytes(sm, k) + sm.embedding_state_bytes[k] <= memory_limit
        load = np.where(fits, slot, INFEASIBLE)
        # after[j, i] = best[j + i + 1]: the rest when this stage takes i + 1 layers from j.
        padded = np.concatenate([best, np.full(layers, INFEASIBLE)])
        after = np.lib.stride_tricks.sliding_window_view(padded[1:], layers)[: layers + 1]
        cost = np.maximum(load[None, :], after)
        take = np.argmin(cost, axis=1)
        new = cost[np.arange(layers + 1), take]
        choice[k] = take + 1
        best = new
    value = float(best[0])
    if value == INFEASIBLE:
        return INFEASIBLE, ()
    balanced = _balanced(sm, layers, memory_limit, value)
    if balanced:
        return value, balanced
    cut, j = [], 0  # the recursion's own choices (reached only if rounding defeats _balanced)
    for k in range(p):
        cut.append(int(choice[k][j]))
        j += cut[-1]
    return value, tuple(cut)


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
