"""The serving side of the predictor: where the model lives, predictions with their reasons,
and the retraining run (import, train, compare, swap) under a lock."""

from __future__ import annotations

import fcntl
import json
import math
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from predictor.evaluate import evaluable
from predictor.features import (
    FEATURES,
    Vocabulary,
    compute,
    compute_one,
    running_elapsed,
    runtime,
)
from predictor.history import ImportReport, import_records, load_history, sacct_records
from predictor.model import (
    AdaptiveCalibrator,
    JctModel,
    ModelError,
    baseline_log,
    load,
    metrics,
    save,
    train,
)
from predictor.swf import JobRecord
from site_config import SiteConfig
from slurm_arnold.errors import ArnoldError
from slurm_arnold.site_state import last_retrain_path, model_dir
from slurm_arnold.slurm import JobInfo, Slurm
from slurm_arnold.state import StateDB

#: A new model replaces the serving one unless its mae_log is worse by more than this share.
NOT_WORSE_TOLERANCE = 0.01
#: Jobs the serving model never saw that a comparison needs.
MIN_NEW_JOBS = 100


class RetrainBusy(ArnoldError):
    """Another retraining run holds the lock."""


def load_serving(config: SiteConfig) -> JctModel:
    """The serving model, or ``ModelError`` saying how to get one."""
    directory = model_dir(config)
    if not (directory / "metadata.json").exists():
        raise ModelError(f"no model in {directory}; train one with 'arnold predictor retrain' "
                         "(after 'arnold predictor import ...')")
    return load(directory)


@dataclass
class Prediction:
    """A job's point and upper predictions (seconds) and the features that moved the point."""

    point: float
    upper: float
    quantile: float
    requested: float | None
    baseline: float
    reasons: list[tuple[str, float, float]]  # (feature, value, effect in log seconds)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"point_s": round(self.point, 1), "upper_s": round(self.upper, 1),
                "quantile": self.quantile, "requested_s": self.requested,
                "baseline_s": round(self.baseline, 1),
                "top_features": [{"feature": f, "value": None if math.isnan(v) else v,
                                  "meaning": describe(f, v),
                                  "effect_log": round(e, 3)} for f, v, e in self.reasons]}


def describe(feature: str, value: float) -> str:
    """A feature value in words (log seconds become hours)."""
    if math.isnan(value):
        return "unknown"
    if feature in ("log_req", "u_last1", "u_last2", "u_last5", "u_same_req", "u_same_sig",
                   "u_med10", "u_run_elapsed", "u_run_same_elapsed", "u_same_req_med"):
        return f"{math.exp(value) / 3600:.3g} h"
    if feature == "u_same_req_n":
        return f"{math.expm1(value):.0f} finished with this limit"
    if feature == "u_req_change":
        return f"x{math.exp(value):.3g} the last job's limit"
    if feature == "u_since_end":
        return f"{math.expm1(value) / 3600:.3g} h ago"
    if feature == "u_last_state":
        return {0.0: "completed", 1.0: "failed", 2.0: "cancelled", 3.0: "timed out"}.get(
            value, f"{value:g}")
    if feature == "log_procs":
        return f"{math.exp(value):.0f} processors"
    if feature == "u_count":
        return f"{math.expm1(value):.0f} finished jobs"
    return f"{value:.3g}"


def predict_job(model: JctModel, job: JobRecord, history: Sequence[JobRecord],
                load_now: Mapping[str, float] | None = None, top: int = 3) -> Prediction:
    """Predict one job; ``reasons`` are the ``top`` features by |SHAP contribution|."""
    row = compute_one(job, history, model.vocab, load_now)[None, :]
    req = float(job.time_limit) if job.time_limit else None
    point, upper = model.predict(row, [req])
    contrib = np.asarray(model.point.predict(row, pred_contrib=True), dtype=float)[0]
    effects = contrib[:-1]  # the last column is the expected value
    order = np.argsort(-np.abs(effects))[:top]
    baseline = math.exp(float(baseline_log(row, float(model.meta["offset_fallback"]))[0]))
    baseline = min(baseline, req) if req else baseline
    return Prediction(float(point[0]), float(upper[0]), float(model.meta["quantile"]), req,
                      baseline, [(FEATURES[i], float(row[0, i]), float(effects[i]))
                                 for i in order])


def job_from_queue(slurm: Slurm, job_id: int) -> tuple[JobRecord, dict[str, float]]:
    """A pending job of the live queue as a record, and the queue's load at this moment."""
    jobs = slurm.jobs(unfinished=True)
    mine = [j for j in jobs if j.job_id == job_id]
    if not mine:
        raise ArnoldError(f"job {job_id} is not in the queue; give a job spec instead "
                          "(--user, --time, --nodes ...)")
    j = mine[0]
    now = int(time.time())
    record = JobRecord(str(j.job_id), j.user, "", j.partition, "", j.name, now, None, None,
                       len(j.nodes) or None, None, None,
                       j.time_limit_min * 60 if j.time_limit_min else None, j.state, None)
    return record, queue_load(jobs, j.user, exclude=job_id, time_limit=record.time_limit,
                              now=now)


def queue_load(jobs: Sequence[JobInfo], user: str, exclude: int | None = None, *,
               time_limit: int | None = None, now: float | None = None) -> dict[str, float]:
    """The features the live queue gives and a finished history cannot: jobs active and
    running, the user's active, and how long the user's running jobs have run by ``now``
    (default: this moment; ``time_limit``: the job's, in seconds, for ``u_run_same_elapsed``)."""
    active = [q for q in jobs if q.state in ("PENDING", "RUNNING", "CONFIGURING")
              and q.job_id != exclude]
    t = time.time() if now is None else now
    user_running = [(float(q.start_time), q.time_limit_min * 60 if q.time_limit_min else None)
                    for q in active if q.user == user and q.state == "RUNNING"
                    and q.start_time is not None]
    elapsed, same = running_elapsed(t, time_limit, user_running)
    return {"active": float(len(active)),
            "running": float(sum(q.state == "RUNNING" for q in active)),
            "u_active": float(sum(q.user == user for q in active)),
            "u_run_elapsed": elapsed, "u_run_same_elapsed": same}


@contextmanager
def retrain_lock(state_dir: Path) -> Iterator[None]:
    """Non-blocking exclusive lock: a second ``retrain`` refuses instead of queueing."""
    state_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(state_dir / "retrain.lock", os.O_RDWR | os.O_CREAT, 0o600)
    os.fchmod(fd, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RetrainBusy(f"another 'arnold predictor retrain' is running (lock "
                              f"{state_dir / 'retrain.lock'}); let it finish") from None
        yield
    finally:
        os.close(fd)


def _holdout_metrics(model: JctModel, matrix: np.ndarray, rows: np.ndarray,
                     actual: np.ndarray, req: np.ndarray) -> dict[str, float]:
    point, _ = model.predict(matrix[rows], list(req[rows]))
    return metrics(point, actual[rows])


def _adapted_alpha(serving: JctModel, jobs: Sequence[JobRecord], matrix: np.ndarray,
                   actual: np.ndarray, req: np.ndarray, quantile: float) -> float | None:
    """The upper model's miscoverage level after the jobs the serving model predicted.

    The serving model's level moves once per job submitted after its training window, in end
    order, by whether its upper prediction covered the job (``matrix``: the jobs' features in
    the serving model's vocabulary; see
    :class:`predictor.model.AdaptiveCalibrator`); the new model starts from it, so the level
    carries over retrains. The predictions are recomputed from the history (live ones also
    saw the queue then); a model from before this level existed starts from ``1 - quantile``.
    """
    if float(serving.meta.get("quantile", quantile)) != quantile:
        return None  # the site changed its quantile: start the level afresh
    calib = AdaptiveCalibrator(quantile, alpha=serving.meta.get("upper_alpha"))
    rows = np.array([i for i, j in enumerate(jobs) if j.submit > serving.meta.get("train_end", 0)],
                    dtype=int)
    if len(rows):
        _, upper = serving.predict(matrix[rows], list(req[rows]))
        for k in sorted(range(len(rows)), key=lambda k: float(jobs[int(rows[k])].end or 0)):
            calib.adapt(bool(actual[rows[k]] > upper[k] + 1e-6))
    return calib.alpha


def retrain(config: SiteConfig, state: StateDB, *, slurm: Slurm | None = None,
            since: str | None = None, force: bool = False) -> dict[str, Any]:
    """Import new finished jobs (when ``slurm`` is given), train, compare, swap if not worse.

    The comparison: a candidate trained on the first 70% (by submit) of the history and the
    serving model are both scored on the jobs of the last 30% that the serving model never saw
    (submitted after its training window), so neither is scored on its own training data. With
    fewer than ``MIN_NEW_JOBS`` such jobs nothing is swapped (``force`` overrides). The
    candidate wins unless its mae_log is worse by more than ``NOT_WORSE_TOLERANCE``; then the
    model trained on all of the history is swapped in. No serving model: swap.
    """
    with retrain_lock(config.state_dir):
        report = ImportReport()
        if slurm is not None:
            report = import_records(state, "sacct", sacct_records(slurm, since))
        jobs = sorted((j for j in load_history(state) if evaluable(j)), key=lambda j: j.submit)
        if len(jobs) < 100:
            raise ModelError(f"only {len(jobs)} finished jobs with a run time and a time limit "
                             "in the history; import more (arnold predictor import ...)")
        quantile = config.predictor.quantile
        actual = np.array([runtime(j) for j in jobs], dtype=float)
        req = np.array([float(j.time_limit or 0) for j in jobs])
        cut = int(len(jobs) * 0.7)
        vocab_cut = Vocabulary(jobs[:cut])
        matrix_cut, _ = compute(jobs, vocab_cut)
        candidate = train(matrix_cut[:cut], actual[:cut], vocab_cut, req=req[:cut],
                          quantile=quantile)
        test = np.arange(cut, len(jobs))
        serving: JctModel | None = None
        try:
            serving = load_serving(config)
        except ModelError:
            serving = None
        result: dict[str, Any] = {"imported": report.added, "history_jobs": len(jobs),
                                  "candidate": _holdout_metrics(candidate, matrix_cut, test,
                                                                actual, req)}
        swap = True
        serving_matrix = None if serving is None else compute(jobs, serving.vocab)[0]
        if serving is not None:
            assert serving_matrix is not None
            unseen = test[[jobs[i].submit > serving.meta.get("train_end", 0) for i in test]]
            result["compared_on"] = len(unseen)
            if len(unseen) < MIN_NEW_JOBS:
                # The serving model has seen the rest: scoring it there flatters it.
                result["reason"] = (f"{len(unseen)} jobs newer than the serving model's window; "
                                    f"at least {MIN_NEW_JOBS} are needed to compare")
                swap = force
            else:
                result["candidate"] = _holdout_metrics(candidate, matrix_cut, unseen, actual,
                                                       req)
                result["serving"] = _holdout_metrics(serving, serving_matrix, unseen, actual,
                                                     req)
                worse = (result["candidate"]["mae_log"]
                         > result["serving"]["mae_log"] * (1 + NOT_WORSE_TOLERANCE))
                result["reason"] = ("new model worse on the new jobs" if worse
                                    else "new model not worse on the new jobs")
                swap = force or not worse
        alpha = None if serving is None or serving_matrix is None else _adapted_alpha(
            serving, jobs, serving_matrix, actual, req, quantile)
        if alpha is not None:
            result["upper_alpha"] = round(alpha, 6)
        if swap:
            vocab = Vocabulary(jobs)
            matrix, _ = compute(jobs, vocab)
            final = train(matrix, actual, vocab, req=req, quantile=quantile,
                          meta={"train_start": jobs[0].submit, "train_end": jobs[-1].submit,
                                "holdout": result["candidate"], "upper_alpha": alpha})
            save(final, model_dir(config))
        result["swapped"] = swap
        result["model_dir"] = str(model_dir(config))
        _keep_outcome(config, result)
        return result


def _keep_outcome(config: SiteConfig, result: dict[str, Any]) -> None:
    """Write the retrain's outcome beside the model, readable by all, in one rename."""
    path = last_retrain_path(config)
    tmp = path.with_suffix(f".tmp.{os.getpid()}")
    tmp.write_text(json.dumps(result | {"finished_at": time.time()}, default=str))
    tmp.chmod(0o644)
    tmp.replace(path)
