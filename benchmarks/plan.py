"""``arnold bench plan``: the cost model against Megatron-LM's Table 1, and search time.

Table 1 (A100, Selene's network): for each row, the published TFLOP/s per GPU, what the cost
model predicts for the published layout, and the planner's own choice with its prediction.
Search time at 1,024 and 16,384 GPUs (targets 1 s and 10 s), and what NEST's dynamic program
(any cut, rank order, CP/EP) gains over the first version's equal-stage search, case by case.
"""

from __future__ import annotations

import time
from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from typing import Any

from slurm_arnold.errors import InfeasibleError
from slurm_arnold.plan.catalog import GPUS, MODELS
from slurm_arnold.plan.cost import EFFICIENCY, ELEMENTWISE_TRAFFIC, Layout, estimate
from slurm_arnold.plan.reference import (
    CALIBRATION_ROWS,
    FLASH_RUNS,
    KORTHIKANTI_RUNS,
    LLAMA_405B,
    MOSAIC_FIT_SEQ,
    MOSAIC_H100_RUNS,
    SELENE,
    fit_mosaic_efficiency,
    flash_run_estimate,
    korthikanti_evaluate,
    korthikanti_layouts,
    llama_405b_estimate,
    mosaic_tokens_per_gpu,
    read_table,
)
from slurm_arnold.plan.search import evaluate_best, search

SPEED_CASES = (("gpt-76.1b", "a100-80g", 1024, 1792), ("gpt3-175b", "h100-80g", 1024, 1536),
               ("llama3-405b", "h100-80g", 88, 64), ("llama3-70b", "h100-80g", 1024, 1024),
               ("mixtral-8x7b", "h100-80g", 256, 1024),
               ("llama3-405b", "h100-80g", 16384, 2048), ("gpt-1008b", "h100-80g", 16384, 16384))


def table1(path: Path) -> list[dict[str, Any]]:
    """Published vs predicted vs planned, per row."""
    a100 = GPUS["a100-80g"]
    out = []
    for r in read_table(path):
        pub = estimate(r.model, a100, SELENE, r.layout, r.global_batch)
        plan = search(r.model, a100, SELENE, r.layout.gpus, r.global_batch)
        lay = plan.layout
        # `arnold plan --evaluate` given only the model, GPUs, batch, TP and PP.
        bare = Layout(r.layout.tp, r.layout.pp, r.layout.dp)
        chosen, est, _ = evaluate_best(r.model, a100, SELENE, bare, set(), r.global_batch)
        # The same with the attention kernel the runs had (2021: no FlashAttention).
        eager, est_eager, _ = evaluate_best(r.model, a100, SELENE,
                                            replace(bare, attention="eager"), set(),
                                            r.global_batch)
        # ... and the whole stack the runs had: no sequence parallelism either (it came in
        # 2022).
        as_run, est_as_run, _ = evaluate_best(
            r.model, a100, SELENE, replace(bare, attention="eager", sequence_parallel=False),
            set(), r.global_batch)
        out.append({
            "evaluate_layout": describe(chosen), "evaluate_tflops": est.tflops_per_gpu,
            "evaluate_error": est.tflops_per_gpu / r.tflops_per_gpu - 1,
            "evaluate_eager_layout": describe(eager),
            "evaluate_eager_tflops": est_eager.tflops_per_gpu,
            "evaluate_eager_error": est_eager.tflops_per_gpu / r.tflops_per_gpu - 1,
            "evaluate_as_run_layout": describe(as_run),
            "evaluate_as_run_tflops": est_as_run.tflops_per_gpu,
            "evaluate_as_run_error": est_as_run.tflops_per_gpu / r.tflops_per_gpu - 1,
            "model": r.model.name, "gpus": r.layout.gpus, "batch": r.global_batch,
            "published_layout": f"TP{r.layout.tp} PP{r.layout.pp} DP{r.layout.dp}",
            "published_tflops": r.tflops_per_gpu, "predicted_tflops": pub.tflops_per_gpu,
            "error": pub.tflops_per_gpu / r.tflops_per_gpu - 1,
            "planned_layout": describe(lay),
            "planned_tflops": plan.estimate.tflops_per_gpu,
            "planned_gib": plan.estimate.memory_gib_per_gpu,
        })
    return out


def llama_405b() -> dict[str, Any]:
    """The published Llama 3 405B layout, evaluated as a user would (nothing but TP and PP):
    the H100 efficiency's one data point, so this row shows the fit, not a check."""
    lay, est = llama_405b_estimate()
    c = LLAMA_405B
    return {"model": "llama3-405b", "gpu": "h100-80g", "gpus": int(c["gpus"]),
            "tp": int(c["tp"]), "pp": int(c["pp"]), "seq": int(c["seq"]),
            "published_tflops": c["published_tflops"], "layout": describe(lay),
            "predicted_tflops": est.tflops_per_gpu,
            "error": est.tflops_per_gpu / c["published_tflops"] - 1,
            "gib": est.memory_gib_per_gpu, "fits": est.fits}


def flash_runs() -> list[dict[str, Any]]:
    """The published FlashAttention runs (``reference.FLASH_RUNS``), evaluated as a user would
    (TP 1, PP 1, the default attention), in tokens per second as they were published: a check
    of the default attention that no constant was fitted on."""
    out = []
    for run in FLASH_RUNS:
        lay, est = flash_run_estimate(run)
        tokens = run["batch"] * run["model"].seq_len / est.step_seconds
        out.append({"model": run["model"].name, "gpu": "a100-80g", "gpus": run["gpus"],
                    "batch": run["batch"], "layout": describe(lay),
                    "published_tokens_per_s": run["tokens_per_s"],
                    "predicted_tokens_per_s": tokens,
                    "error": tokens / run["tokens_per_s"] - 1,
                    "predicted_tflops": est.tflops_per_gpu, "gib": est.memory_gib_per_gpu})
    return out


def korthikanti_runs() -> list[dict[str, Any]]:
    """Megatron-LM of 2022 (``reference.KORTHIKANTI_RUNS``), fitted on by nothing: each row's
    two published settings priced as they ran, and ``--evaluate --attention eager`` given
    only the model, GPUs, batch, TP and PP. Errors are in throughput (published seconds over
    predicted, minus one: positive when the prediction is faster)."""
    a100 = GPUS["a100-80g"]
    out = []
    for run in KORTHIKANTI_RUNS:
        full, present = korthikanti_layouts(run)
        model, batch = run["model"], int(run["batch"])
        pres = estimate(model, a100, SELENE, present, batch)
        chosen, est = korthikanti_evaluate(run)
        row: dict[str, Any] = {
            "model": model.name, "gpus": present.gpus, "batch": batch, "dp": present.dp,
            "layout": f"TP{present.tp} PP{present.pp} DP{present.dp} mb{present.micro_batch} "
                      f"v{present.interleave}",
            "published_full_s": run["full_s"], "predicted_full_s": None, "full_error": None,
            "published_present_s": run["present_s"], "predicted_present_s": pres.step_seconds,
            "present_error": run["present_s"] / pres.step_seconds - 1,
            "evaluate_layout": describe(chosen), "evaluate_s": est.step_seconds,
            "evaluate_error": run["present_s"] / est.step_seconds - 1,
        }
        # The paper: none of the models fits in 80 GB without both sequence parallelism and
        # selective recomputation (section 6.1); the model's memory for each combination.
        row["fits"] = {"sp_selective": pres.fits} | {
            name: estimate(model, a100, SELENE, lay, batch).fits for name, lay in (
                ("sp_none", replace(present, recompute="none")),
                ("selective", replace(present, sequence_parallel=False)),
                ("none", replace(present, recompute="none", sequence_parallel=False)))}
        if run["full_s"] is not None:
            old = estimate(model, a100, SELENE, full, batch)
            row |= {"predicted_full_s": old.step_seconds,
                    "full_error": run["full_s"] / old.step_seconds - 1}
        out.append(row)
    return out


def korthikanti_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """The docs lines of ``korthikanti_runs``."""
    lines = ["", "Megatron-LM of 2022 on the same machine, fitted on by nothing (Korthikanti et "
             "al., MLSys 2023, Tables 3 and 5: seconds per iteration; eager attention, no "
             "ZeRO; `reference.KORTHIKANTI_RUNS`). Each row as it ran with full recomputation "
             "and no sequence parallelism, and with sequence parallelism and selective "
             "recomputation; then `--evaluate --attention eager` given only the model, GPUs, "
             "batch, TP and PP, against the latter. Errors in throughput (positive: predicted "
             "faster):", "",
             "| model | GPUs | batch | layout | full, no SP: published s | predicted | error | "
             "SP + selective: published s | predicted | error | `--evaluate --attention "
             "eager` | its s | error |", "|" + "---|" * 13]
    for r in rows:
        full = (f"{r['published_full_s']:.2f} | {r['predicted_full_s']:.2f} | "
                f"{r['full_error']:+.1%}" if r["published_full_s"] is not None
                else "- | - | -")
        lines.append(f"| {r['model']} | {r['gpus']} | {r['batch']} | {r['layout']} | {full} | "
                     f"{r['published_present_s']:.2f} | {r['predicted_present_s']:.2f} | "
                     f"{r['present_error']:+.1%} | {r['evaluate_layout']} | "
                     f"{r['evaluate_s']:.2f} | {r['evaluate_error']:+.1%} |")
    settings = [abs(e) for r in rows for e in (r["full_error"], r["present_error"])
                if e is not None]
    chosen = [abs(r["evaluate_error"]) for r in rows]
    lines += ["", f"As they ran: {sum(e <= 0.15 for e in settings)} of {len(settings)} within "
              f"15% (the issue's rule for published runs the project does not have), "
              f"{sum(e <= 0.10 for e in settings)} within 10%, largest {max(settings):.1%}. "
              f"`--evaluate` given TP and PP only: {sum(e <= 0.15 for e in chosen)} of "
              f"{len(chosen)} within 15%, largest {max(chosen):.1%}; where it is faster it "
              "chose what the paper did not run (these runs fixed the micro-batch and the "
              "recomputation to compare the techniques)."]
    claims = [(r["model"], name, ok) for r in rows if r["dp"] == 1 for name, ok in
              r["fits"].items()]
    agree = [c for c in claims if c[2] == (c[1] == "sp_selective")]
    names = {"sp_selective": "with both", "sp_none": "with SP and no recomputation",
             "selective": "with selective recomputation and no SP", "none": "with neither"}
    wrong = [f"{m} {names[n]}" for m, n, ok in claims if (m, n, ok) not in agree]
    lines += ["", "Memory, against the paper's statement that none of these models fits in 80 GB "
              "without both sequence parallelism and selective recomputation (section 6.1): "
              f"the cost model agrees in {len(agree)} of {len(claims)} cases (each model with "
              "both, with SP and no recomputation, with selective recomputation and no SP, "
              "with neither)" + (f"; it would fit {', '.join(wrong)}" if wrong else "") + "."]
    return lines


def mosaic_h100() -> dict[str, Any]:
    """MosaicML's one-node H100 runs (``reference.MOSAIC_H100_RUNS``) priced as they ran: with
    the catalogue's H100 figure (fitted on Meta's Llama 3 run), and with the efficiency a site
    on MosaicML's stack would put in its GPU file (fitted on the rows up to 2,048 tokens)."""
    stack = fit_mosaic_efficiency()
    rows = []
    for run in MOSAIC_H100_RUNS:
        rows.append({"model": run[0], "seq": run[1], "micro_batch": run[2],
                     "recompute": "full" if run[4] else "none",
                     "published_tokens_per_gpu": run[5],
                     "error": mosaic_tokens_per_gpu(run) / run[5] - 1,
                     "stack_error": mosaic_tokens_per_gpu(run, stack) / run[5] - 1})
    return {"stack_efficiency": stack, "fit_seq": MOSAIC_FIT_SEQ, "rows": rows}


def nest_instances(directory: Path) -> list[dict[str, Any]]:
    """Each NEST instance in ``directory`` that has NEST's own result beside it
    (``NAME.json`` and ``NAME.nest-result.json``): our search on NEST's costs, NEST's layout
    priced by us (the check that the costs are NEST's), and both times. Search seconds are the
    median of 3 in this process; the command's wall time (process start included) beside it."""
    import json
    import statistics
    import subprocess
    import sys

    from slurm_arnold.plan.nest_costs import price, search_nest
    from slurm_arnold.plan.nest_input import NestLayout, read_nest_input

    rows = []
    for path in sorted(directory.glob("*.json")):
        result_path = path.with_name(path.stem + ".nest-result.json")
        if path.name.endswith(".nest-result.json") or not result_path.exists():
            continue
        nest = json.loads(result_path.read_text())
        inst = read_nest_input(path)
        plans = [search_nest(inst) for _ in range(3)]
        plan = plans[0]
        g = inst.graphs[nest["tensorParallelDegree"]]
        position = {node: k for k, node in enumerate(g.ids)}
        cuts = (0, *(position[st["nodes"][-1]] + 1 for st in nest["stages"]))
        nest_layout = NestLayout(nest["tensorParallelDegree"], nest["dataParallelDegree"], cuts,
                                 nest["stages"][0]["devicesForStage"])
        started = time.perf_counter()
        arnold = Path(sys.executable).with_name("arnold")
        subprocess.run([str(arnold) if arnold.exists() else "arnold", "plan", "--nest-input",
                        str(path), "--json"], check=True, capture_output=True)
        wall = time.perf_counter() - started
        lay = plan.layout
        rows.append({
            "instance": path.name, "devices": inst.max_devices, "tp_widths": sorted(inst.graphs),
            "nodes": max(gr.size for gr in inst.graphs.values()),
            "ours": {"tp": lay.tp, "pp": lay.pp, "dp": lay.dp,
                     "nodes_per_stage": [b - a for a, b in pairwise(lay.cuts)],
                     "finalTimePerBatch": plan.time_per_batch,
                     "search_seconds": statistics.median(p.search_seconds for p in plans),
                     "command_seconds": wall},
            "nest": {"tp": nest["tensorParallelDegree"], "pp": len(nest["stages"]),
                     "dp": nest["dataParallelDegree"],
                     "nodes_per_stage": [len(st["nodes"]) for st in nest["stages"]],
                     "finalTimePerBatch": nest["finalTimePerBatch"],
                     "priced_by_us": price(inst, nest_layout)[0],
                     "baselines": nest.get("baselineResults", {})},
        })
    return rows


def describe(lay: Layout) -> str:
    """A layout in one short line."""
    extra = (f" CP{lay.cp}" if lay.cp > 1 else "") + (f" EP{lay.ep}" if lay.ep > 1 else "")
    cut = f" stages {','.join(map(str, lay.stages))}" if lay.stages else ""
    return (f"TP{lay.tp} PP{lay.pp} DP{lay.dp}{extra} mb{lay.micro_batch} ZeRO-{lay.zero} "
            f"{lay.recompute} v{lay.interleave} {lay.order}{cut}")


def speed(quick: bool = False) -> list[dict[str, Any]]:
    """Search seconds per case (median of 3), and the best equal-stage plan beside it."""
    out = []
    for name, gpu, gpus, batch in SPEED_CASES[:2] if quick else SPEED_CASES:
        times = []
        for _ in range(1 if quick else 3):
            t0 = time.perf_counter()
            plan = search(MODELS[name], GPUS[gpu], SELENE, gpus, batch)
            times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        try:
            equal: Any = search(MODELS[name], GPUS[gpu], SELENE, gpus, batch,
                                equal_stages=True)
            equal_step = equal.estimate.step_seconds
        except InfeasibleError:
            equal_step = None
        out.append({"model": name, "gpu": gpu, "gpus": gpus, "batch": batch,
                    "seconds": sorted(times)[len(times) // 2], "evaluated": plan.evaluated,
                    "pruned": plan.pruned, "layout": describe(plan.layout),
                    "step_seconds": plan.estimate.step_seconds,
                    "equal_stages_step_seconds": equal_step})
    return out


def nest_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """The NEST paragraph and table of the docs section."""
    if not rows:
        return ["", "NEST's own instances: none found (`--nest-dir`), nothing compared."]
    lines = ["", "NEST's own instances (`arnold plan --nest-input`, issue 25): NEST's solver input "
             "as its `nest.py` wrote it, searched on NEST's costs (docs/plan.md says which of its "
             "semantics are followed); NEST's figures from its own program's output beside it. "
             "`priced by us` is NEST's layout priced by our code: equal to NEST's number means "
             "the costs are NEST's. NEST's binary time is the instance README's (0.73 s, a "
             "2-core machine); ours is the search's median of 3 and the whole command's wall "
             "time, process start included.", "",
             "| instance | devices | ours: layout | ours: time per batch | NEST: layout | "
             "NEST: time per batch | NEST's layout priced by us | ours / NEST | "
             "our search s | `arnold plan` wall s | NEST's baselines |", "|" + "---|" * 11]
    for r in rows:
        o, n = r["ours"], r["nest"]
        base = ", ".join(f"{k} {v:,.0f}" for k, v in sorted(n["baselines"].items())
                         if v is not None)
        lines.append(
            f"| {r['instance']} | {r['devices']} | TP{o['tp']} PP{o['pp']} DP{o['dp']} "
            f"({','.join(map(str, o['nodes_per_stage']))}) | **{o['finalTimePerBatch']:,.1f}** | "
            f"TP{n['tp']} PP{n['pp']} DP{n['dp']} ({','.join(map(str, n['nodes_per_stage']))})"
            f" | {n['finalTimePerBatch']:,.1f} | {n['priced_by_us']:,.1f}"
            f"{' (equal)' if n['priced_by_us'] == n['finalTimePerBatch'] else ''} | "
            f"x{o['finalTimePerBatch'] / n['finalTimePerBatch']:.6f} | "
            f"{o['search_seconds']:.4f} | {o['command_seconds']:.2f} | {base} |")
    return lines


def mosaic_markdown(mosaic: dict[str, Any]) -> list[str]:
    """The H100 check on MosaicML's runs: one line per model, the error at each sequence."""
    rows = mosaic["rows"]
    fit = [r for r in rows if r["seq"] <= mosaic["fit_seq"]]
    rest = [r for r in rows if r["seq"] > mosaic["fit_seq"]]

    def worst(rs: list[dict[str, Any]], key: str) -> str:
        return f"{max((abs(r[key]) for r in rs), default=0.0):.1%}"

    lines = ["", "H100 on another software stack: every one-node row (8 x H100 80GB, bf16) of "
             "MosaicML's llm-foundry benchmarks (PyTorch FSDP full sharding, their "
             "FlashAttention kernels), priced as each ran (ZeRO-3, its micro-batch and "
             "checkpointing; `reference.MOSAIC_H100_RUNS`), in tokens/s per GPU. `catalogue`: "
             f"the H100 figure ({EFFICIENCY['h100-80g']}, fitted on Meta's Llama 3 run); "
             f"`stack`: {mosaic['stack_efficiency']}, the `efficiency` a site on that stack "
             "would put in its GPU file, fitted on the rows of at most "
             f"{mosaic['fit_seq']:,} tokens and checked on the longer ones.", "",
             "| model | error by sequence length: catalogue / stack |", "|---|---|"]
    for model in dict.fromkeys(r["model"] for r in rows):
        cells = [f"{r['seq']:,}: {r['error']:+.0%} / {r['stack_error']:+.0%}"
                 for r in sorted((r for r in rows if r["model"] == model),
                                 key=lambda r: r["seq"])]
        lines.append(f"| {model} | {', '.join(cells)} |")
    lines += ["", f"The catalogue figure over-predicts that stack everywhere (largest error "
              f"{worst(rows, 'error')}): it is a Megatron/Meta-grade stack's. Calibrated on "
              f"the short rows (largest error there {worst(fit, 'stack_error')}), the longer "
              f"ones stay optimistic (largest {worst(rest, 'stack_error')}): that stack's "
              "attention kernel runs slower than its matrix multiplications, which the cost "
              "model prices alike. A site measures its own stack and sets `efficiency` in its "
              "GPU file (docs/plan.md)."]
    return lines


def markdown(rows: list[dict[str, Any]], speeds: list[dict[str, Any]], command: str,
             llama: dict[str, Any] | None = None,
             nest: list[dict[str, Any]] | None = None,
             flash: list[dict[str, Any]] | None = None,
             mosaic: dict[str, Any] | None = None,
             korthikanti: list[dict[str, Any]] | None = None) -> str:
    """The docs section."""
    lines = ["## Planner: Megatron-LM Table 1 and search time", "",
             f"Command: `{command}`. A100: matrix multiplications at {EFFICIENCY['a100-80g']} "
             f"of peak and elementwise traffic {ELEMENTWISE_TRAFFIC} x the activations per pass "
             f"at HBM bandwidth, both fitted on the rows {', '.join(CALIBRATION_ROWS)} and "
             "checked on the others (`slurm_arnold/plan/reference.py`; eager attention and no "
             "sequence parallelism, as the paper ran); "
             "network: Selene's (NVLink 3, one 200 Gb/s HDR link per GPU). The planner is exact "
             "over its space: NEST's dynamic program for the cut of the layers into stages "
             "(memory checked inside it), every template priced, those whose lower bound "
             "cannot reach the top six skipped.", "",
             "| model | GPUs | published layout | published TFLOP/s | predicted | error | "
             "`--evaluate` given TP and PP only (FlashAttention) | its TFLOP/s | error | "
             "the same with `--attention eager` | its TFLOP/s | error | "
             "the same with `--attention eager --no-sequence-parallel` | its TFLOP/s | error | "
             "planner's layout | its TFLOP/s | GiB/GPU |", "|" + "---|" * 18]
    for r in rows:
        lines.append(f"| {r['model']} | {r['gpus']} | {r['published_layout']} | "
                     f"{r['published_tflops']:.0f} | {r['predicted_tflops']:.1f} | "
                     f"{r['error']:+.1%} | {r['evaluate_layout']} | {r['evaluate_tflops']:.1f} | "
                     f"{r['evaluate_error']:+.1%} | {r['evaluate_eager_layout']} | "
                     f"{r['evaluate_eager_tflops']:.1f} | {r['evaluate_eager_error']:+.1%} | "
                     f"{r['evaluate_as_run_layout']} | {r['evaluate_as_run_tflops']:.1f} | "
                     f"{r['evaluate_as_run_error']:+.1%} | "
                     f"{r['planned_layout']} | {r['planned_tflops']:.1f} | "
                     f"{r['planned_gib']:.1f} |")
    worst = max(abs(r["error"]) for r in rows) if rows else 0.0
    for key, what in (("evaluate_error", "with FlashAttention (the default)"),
                      ("evaluate_eager_error", "with `--attention eager` (Megatron-LM's "
                       "stack of 2022: sequence parallelism, no FlashAttention)"),
                      ("evaluate_as_run_error", "with `--attention eager "
                       "--no-sequence-parallel`, the stack the runs were made with (2021: "
                       "neither FlashAttention nor sequence parallelism)")):
        within = sum(abs(r[key]) <= 0.10 for r in rows)
        lines += ["", f"`--evaluate` given only the model, GPUs, batch, TP and PP, {what}: "
                  f"{within} of {len(rows)} rows within 10%, largest error "
                  f"{max((abs(r[key]) for r in rows), default=0.0):.1%} (target: every row "
                  "within 10%). It chooses recomputation, micro-batch, ZeRO, interleaving and "
                  "rank order, the fastest that fits, which is often not what the paper ran: "
                  "where it is faster than the published figure it predicts a better run, not "
                  "the same one."]
    if llama is not None:
        lines += ["", f"Llama 3 405B as published ({llama['gpus']:,} x {llama['gpu']}, TP "
                  f"{llama['tp']} x PP {llama['pp']}, sequence {llama['seq']:,}; 126 layers in "
                  f"16 stages), `--evaluate` without `--stages`: {llama['layout']}, "
                  f"**{llama['predicted_tflops']:.1f} TFLOP/s** beside the published "
                  f"{llama['published_tflops']:.0f} ({llama['error']:+.1%}), "
                  f"{llama['gib']:.1f} GiB per GPU. This figure is what the H100 efficiency "
                  f"({EFFICIENCY['h100-80g']}) was fitted on, so it shows the fit, not a check; "
                  "MosaicML's runs below check it, on another software stack."]
    if flash:
        lines += ["", "FlashAttention, the default, checked on runs made with it (the "
                  "flash-attention repository's training README, one node of 8 x A100 80GB, "
                  "sequence 2,048, batches of 0.5M tokens up to 760M and of 1M above, no "
                  "activation checkpointing; "
                  "`slurm_arnold/plan/reference.py`, fitted on none of them), evaluated given "
                  "TP 1 and PP 1:", "",
                  "| model | GPUs | `--evaluate` layout | published tokens/s | predicted | "
                  "error | its TFLOP/s | GiB/GPU |", "|" + "---|" * 8]
        for f in flash:
            lines.append(f"| {f['model']} | {f['gpus']} | {f['layout']} | "
                         f"{f['published_tokens_per_s']:,.0f} | "
                         f"{f['predicted_tokens_per_s']:,.0f} | {f['error']:+.1%} | "
                         f"{f['predicted_tflops']:.1f} | {f['gib']:.1f} |")
        errors = [f["error"] for f in flash]
        if max(errors) < 0:
            lines += ["", "With FlashAttention the cost model predicts less than every one of "
                      f"these runs achieved ({-max(errors):.1%} to {-min(errors):.1%} less), "
                      "so where `--evaluate` with it predicts more than a Table 1 row, that "
                      "is what a run of that layout with FlashAttention would do, not what "
                      "the paper's runs (eager attention, everything recomputed) did."]
        else:
            lines += ["", "With FlashAttention the cost model's error on these runs ranges "
                      f"from {min(errors):+.1%} to {max(errors):+.1%}."]
    if korthikanti:
        lines += korthikanti_markdown(korthikanti)
    if mosaic:
        lines += mosaic_markdown(mosaic)
    lines += ["", f"Largest error on the published layouts: {worst:.1%} (target 15%). "
              "The planner's choices are faster mostly by dropping full recomputation where "
              "memory allows and by interleaving (smaller bubble); TFLOP/s counts the FLOPs "
              "each layout executes (recomputation included, as the paper counts its own runs, "
              "which all recompute everything), so recomputing less cannot inflate it.", "",
              "Search time and what the dynamic program gains: `equal stages` is the best plan "
              "when every stage has the same layers (the first version's search), same cost "
              "model, same run.", "",
              "| model | GPU | GPUs | batch | priced | skipped by bound | search time | plan | "
              "step s | equal stages: step s | ratio |", "|" + "---|" * 11]
    for s in speeds:
        target = 1.0 if s["gpus"] <= 1024 else 10.0
        eq = s["equal_stages_step_seconds"]
        lines.append(f"| {s['model']} | {s['gpu']} | {s['gpus']:,} | {s['batch']} | "
                     f"{s['evaluated']:,} | {s['pruned']:,} | "
                     f"**{s['seconds']:.3f} s** ({'met' if s['seconds'] < target else 'NOT met'}"
                     f": < {target:g} s) | {s['layout']} | {s['step_seconds']:.3f} | "
                     + (f"{eq:.3f} | x{s['step_seconds'] / eq:.3f} |" if eq is not None
                        else "nothing fits | - |"))
    if nest is not None:
        lines += nest_markdown(nest)
    return "\n".join(lines)
