"""``arnold bench predictor``: training time on a large history and prediction latency.

The history is the two shared logs tiled: copy k of a log is shifted in time after copy k-1
and its users, groups and queues are renamed, until the target size is reached (450,000 jobs:
the size the issue names, about 13 copies of the two logs). Without the shared logs, a
seeded synthetic log of the same size is used, and the section says so.
"""

from __future__ import annotations

import platform
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.logs import LOGS as SIM_LOGS
from predictor.evaluate import evaluable
from predictor.features import Vocabulary, compute, runtime
from predictor.model import (
    ACI_GAMMA,
    ACI_GAMMAS,
    ACI_HORIZON,
    ACI_MARGIN,
    aci_margin_needed,
    train,
)
from predictor.service import predict_job
from predictor.swf import JobRecord, read_swf

LOGS = ("CEA-Curie-2011-window.swf.gz", "KTH-SP2-1996-2.swf.gz")
#: Accuracy is measured on every shared log (the speed bench keeps its two-log history).
ACCURACY_LOGS = tuple(setup.file for setup in SIM_LOGS)
SHORT = {setup.file: setup.name for setup in SIM_LOGS}
#: The issue's accuracy targets: model's mae_log this far below last2's, model_q's coverage.
MAE_BELOW_LAST2 = 0.17
COVERAGE = 0.9


def _synthetic(n: int, seed: int) -> list[JobRecord]:
    rng = random.Random(seed)
    out, t = [], 0
    for i in range(n):
        t += rng.randint(1, 120)
        req = rng.choice([600, 3600, 7200, 86400])
        run = min(req, int(rng.lognormvariate(7, 1.8)) + 1)
        start = t + rng.randint(0, 900)
        out.append(JobRecord(str(i), f"u{rng.randint(0, 400)}", "g", "p", "q", "n", t, start,
                             start + run, None, None, rng.choice([1, 8, 64, 512]), req,
                             "COMPLETED", 0))
    return out


def tiled_history(size: int, data_dir: Path, seed: int = 0) -> tuple[list[JobRecord], str]:
    """``size`` jobs from the shared logs tiled in time (or synthetic), and where they came from."""
    logs = [data_dir / name for name in LOGS]
    if not all(p.exists() for p in logs):
        return _synthetic(size, seed), f"synthetic (shared logs absent in {data_dir})"
    bases = [[j for j in read_swf(p) if isinstance(j, JobRecord) and evaluable(j)] for p in logs]
    out: list[JobRecord] = []
    shift, copy = 0, 0
    while len(out) < size:
        for base in bases:
            first = min(j.submit for j in base)
            span = max((j.end or j.submit) for j in base) - first + 86400
            for j in base:
                out.append(replace(
                    j, job_id=f"{copy}:{j.job_id}", user=f"{copy}:{j.user}",
                    group=f"{copy}:{j.group}", qos=f"{copy}:{j.qos}",
                    submit=j.submit - first + shift,
                    start=None if j.start is None else j.start - first + shift,
                    end=None if j.end is None else j.end - first + shift))
            shift += span
            copy += 1
    return out[:size], f"{copy} time-shifted copies of the two shared logs"


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - t0


def run(size: int, data_dir: Path, probes: int = 200, seed: int = 0) -> dict[str, Any]:
    """Time feature computation, training, batch prediction and single-job prediction."""
    jobs, origin = tiled_history(size, data_dir, seed)
    jobs.sort(key=lambda j: j.submit)
    vocab = Vocabulary(jobs)
    (matrix, _), t_features = _timed(lambda: compute(jobs, vocab))
    actual = np.array([runtime(j) for j in jobs], dtype=float)
    req = np.array([float(j.time_limit or 0) for j in jobs])
    model, t_train = _timed(lambda: train(matrix, actual, vocab, req=req))
    sample = np.random.default_rng(seed).choice(len(jobs), size=min(probes, len(jobs)),
                                                replace=False)
    _, t_batch = _timed(lambda: model.predict(matrix, list(req)))
    singles = []
    for i in sample:
        row, limit = matrix[i:i + 1], float(req[i])
        t0 = time.perf_counter()
        model.predict(row, [limit])
        singles.append(time.perf_counter() - t0)
    # The path of `arnold predictor predict` after loading: the user's history (as the CLI
    # reads it from SQLite), the feature row, both models and the SHAP reasons.
    by_user: dict[str, list[JobRecord]] = {}
    for j in jobs:
        by_user.setdefault(j.user, []).append(j)
    load_now = {"active": 100.0, "running": 50.0, "u_active": 1.0}
    full = []
    for i in sample[: min(50, len(sample))]:
        job = replace(jobs[i], submit=jobs[-1].submit + 1)
        history: Sequence[JobRecord] = by_user[job.user]
        t0 = time.perf_counter()
        predict_job(model, job, history, load_now)
        full.append(time.perf_counter() - t0)
    return {
        "jobs": len(jobs), "origin": origin, "cpus": _cpus(),
        "features_s": round(t_features, 1), "train_s": round(t_train, 1),
        "train_total_s": round(t_features + t_train, 1),
        "batch_ms_per_job": round(1000 * t_batch / len(jobs), 4),
        "single_ms_p50": round(1000 * float(np.median(singles)), 2),
        "single_ms_p95": round(1000 * float(np.quantile(singles, 0.95)), 2),
        "predict_path_ms_p50": round(1000 * float(np.median(full)), 1),
        "predict_path_ms_p95": round(1000 * float(np.quantile(full, 0.95)), 1),
    }


def accuracy(data_dir: Path) -> dict[str, Any]:
    """``arnold predictor evaluate`` on each shared log (the issue's 70/30 split)."""
    from predictor.evaluate import evaluate

    out: dict[str, Any] = {}
    for name in ACCURACY_LOGS:
        path = data_dir / name
        if path.exists():
            jobs = [j for j in read_swf(path) if isinstance(j, JobRecord)]
            out[name] = evaluate(jobs, ablation=True)
    return out


def accuracy_markdown(result: dict[str, Any], command: str) -> str:
    """The accuracy section: every method on every log, and the issue's reference."""
    reference = {"KTH-SP2-1996-2.swf.gz": 1.31, "CEA-Curie-2011-window.swf.gz": 1.39}
    lines = ["## Predictor: accuracy on the shared logs", "",
             f"Command: `{command}`. Split: evaluable jobs (run time > 0 and requested time > 0) "
             "sorted by submit, first 70% train, last 30% test; history features use every job "
             "that ended before a job's submit. `model_q`'s conformal delta adapts at each submit "
             "to the jobs that had ended by then (adaptive conformal inference: the window of "
             "their scores, and a level moved by the misses of the deltas they were served).",
             "",
             "| log | train / test | method | mae_h | rmse_h | mae_log | rmse_log | coverage |",
             "|---|---|---|---|---|---|---|---|"]
    for log, r in result.items():
        for method, m in r["methods"].items():
            lines.append(f"| {log} | {r['n_train']} / {r['n_test']} | {method} | "
                         + " | ".join(f"{m[k]:.3f}" for k in ("mae_h", "rmse_h", "mae_log",
                                                               "rmse_log", "coverage")) + " |")
    lines += ["", "Ablation, same split and features: `model_l2` is the served point model with "
              "L2 instead of L1 (still boosted from last2), `model_l2_plain` L2 from nothing "
              "(the issue's reference LightGBM); `model_q_static` keeps the upper model's "
              "conformal delta from training; `model_q_daily` takes the q-quantile of the "
              "recent scores once a day without adapting the level (the served model until "
              "this wave's last change); `model_q_no_margin` aims at the quantile itself "
              f"instead of {ACI_MARGIN:g} above it (`ACI_MARGIN`). "
              + " ".join(_ablation_line(log, r["methods"]) for log, r in result.items())
              + _gamma_choice(result)]
    lines += ["", "Targets (model's mae_log at least "
              f"{MAE_BELOW_LAST2:.0%} below last2's; model_q's coverage >= {COVERAGE}): "
              + "; ".join(_targets_line(log, r["methods"], r.get("test_outran_cap"),
                                        r.get("upper_grace_s"), r.get("model_members_mae_log"))
                          for log, r in result.items()) + "."]
    lines += ["", "Against the issue's reference (a straightforward LightGBM, L2 on log run "
              "time): " + "; ".join(
                  f"{SHORT.get(log, log)} model mae_log "
                  f"{r['methods']['model']['mae_log']:.3f} vs {reference[log]} "
                  f"(last2 {r['methods']['last2']['mae_log']:.3f})"
                  for log, r in result.items() if log in reference) + "."]
    return "\n".join(lines)


def _targets_line(log: str, m: dict[str, Any], outran: float | None = None,
                  grace: float | None = None, members: list[float] | None = None) -> str:
    below = 1 - m["model"]["mae_log"] / m["last2"]["mae_log"]
    coverage = m["model_q"]["coverage"]
    # A prediction capped at the request plus the grace covers no job that ran past that.
    bound = (f"; at most {1 - outran:.3f} capped at the request + {grace:.0f} s"
             if outran is not None and grace is not None else "")
    # What one booster alone would have scored, seed by seed: the ensemble's reason to be.
    alone = ""
    if members and len(members) > 1:
        each = sorted(1 - v / m["last2"]["mae_log"] for v in members)
        alone = f", its {len(members)} boosters alone {each[0]:.1%} to {each[-1]:.1%}"
    return (f"{SHORT.get(log, log)} {below:.1%} below ("
            f"{'met' if below >= MAE_BELOW_LAST2 else 'missed'}{alone}), coverage "
            f"{coverage:.4f} ({'met' if coverage >= COVERAGE else 'missed'}{bound})")


def _ablation_line(log: str, m: dict[str, Any]) -> str:
    if "model_l2" not in m:
        return ""
    name = SHORT.get(log, log)
    return (f"{name}: mae_log L1 {m['model']['mae_log']:.3f} vs L2 {m['model_l2']['mae_log']:.3f}"
            f" vs L2 plain {m['model_l2_plain']['mae_log']:.3f}; coverage adaptive "
            f"{m['model_q']['coverage']:.3f} vs daily {m['model_q_daily']['coverage']:.3f} vs "
            f"static {m['model_q_static']['coverage']:.3f}; mae_log of the upper prediction "
            f"{m['model_q']['mae_log']:.3f} vs {m['model_q_daily']['mae_log']:.3f} vs "
            f"{m['model_q_static']['mae_log']:.3f}; coverage by the adaptive step gamma: "
            + ", ".join(f"{g:g} {_gamma(m, g)['coverage']:.4f}" for g in ACI_GAMMAS)
            + (f"; aimed at the quantile itself (no margin) coverage "
               f"{m['model_q_no_margin']['coverage']:.4f}, upper mae_log "
               f"{m['model_q_no_margin']['mae_log']:.3f}" if "model_q_no_margin" in m else "")
            + ".")


def _gamma_choice(result: dict[str, Any]) -> str:
    """Which adaptive step has the best worst-case coverage over the logs among those whose
    bound the margin covers, beside the one used."""
    if any("model_l2" not in r["methods"] for r in result.values()):
        return ""
    worst = {g: min(_gamma(r["methods"], g)["coverage"] for r in result.values())
             for g in ACI_GAMMAS}
    covered = [g for g in ACI_GAMMAS if aci_margin_needed(g) <= ACI_MARGIN]
    best = max(covered, key=lambda g: worst[g]) if covered else None
    return (" Worst coverage over these logs by step: "
            + ", ".join(f"{g:g} {w:.4f}" for g, w in worst.items())
            + f". The margin ({ACI_MARGIN:g}) covers ACI's bound over {ACI_HORIZON:,} jobs "
            "for the steps " + (", ".join(f"{g:g}" for g in covered) or "none")
            + " (needed: " + ", ".join(f"{g:g} {aci_margin_needed(g):.4f}" for g in ACI_GAMMAS)
            + f"); the best worst case among them is {'none' if best is None else f'{best:g}'}"
            f", the step in use {ACI_GAMMA:g}.")


def _gamma(m: dict[str, Any], gamma: float) -> dict[str, Any]:
    """The methods entry of ``model_q`` adapted with step ``gamma`` (the default is model_q)."""
    entry: dict[str, Any] = m["model_q"] if gamma == ACI_GAMMA else m[f"model_q_gamma_{gamma:g}"]
    return entry


def _cpus() -> str:
    import os

    return f"{os.cpu_count()} CPUs, {platform.machine()}"


def markdown(result: dict[str, Any], command: str) -> str:
    """The benchmarks.md section."""
    r = result
    verdict_train = "met" if r["train_total_s"] < 180 else "NOT met"
    verdict_pred = "met" if r["single_ms_p95"] < 5 else "NOT met"
    return "\n".join([
        "## Predictor: training and prediction time",
        "",
        f"Command: `{command}` ({r['cpus']}).",
        "",
        f"History: {r['jobs']:,} jobs ({r['origin']}).",
        "",
        "| step | time |",
        "|---|---|",
        f"| submit-time features of every job | {r['features_s']} s |",
        f"| training (point + quantile + calibration model) | {r['train_s']} s |",
        f"| **features + training** (target < 180 s: {verdict_train}) | "
        f"**{r['train_total_s']} s** |",
        f"| prediction, batch, per job | {r['batch_ms_per_job']} ms |",
        f"| prediction, one job at a time, p50 / p95 (target < 5 ms: {verdict_pred}) | "
        f"{r['single_ms_p50']} / **{r['single_ms_p95']} ms** |",
        f"| `arnold predictor predict` path after reading the user's history (features, "
        f"both models, SHAP reasons), p50 / p95 | {r['predict_path_ms_p50']} / "
        f"{r['predict_path_ms_p95']} ms |",
    ])
