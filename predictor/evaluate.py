"""``arnold predictor evaluate``: the time-ordered 70/30 split and the four methods."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from predictor.features import Vocabulary, compute, runtime
from predictor.model import (
    Calibrator,
    JctModel,
    conformity_scores,
    fit_point,
    log_seconds,
    metrics,
    predict_point,
    train,
)
from predictor.swf import JobRecord
from slurm_arnold.errors import ArnoldError


def evaluable(job: JobRecord) -> bool:
    """Jobs with run time > 0 and requested time > 0 are evaluated."""
    rt = runtime(job)
    return rt is not None and rt > 0 and bool(job.time_limit and job.time_limit > 0)


def daily_deltas(model: JctModel, kept: Sequence[JobRecord], matrix: np.ndarray, cut: int,
                 actual: np.ndarray, req: np.ndarray) -> np.ndarray:
    """The upper model's conformal delta for each test job, recalibrated once per day.

    At the first submit of each day the delta is recomputed from the scores of jobs that had
    ended by then: the training window's calibration jobs (scored by the model that did not see
    them) and test jobs (scored by the served model), as a daily ``retrain`` would. Nothing that
    ends after the submit is used.
    """
    start = int(model.meta["calibration_start"])
    calib = Calibrator(float(model.meta["quantile"]))
    ends = np.array([float(j.end or 0) for j in kept])
    if model.calibration_scores is not None:
        calib.extend(ends[start:cut], model.calibration_scores)
    calib.extend(ends[cut:], conformity_scores(model.raw_upper(matrix[cut:]), actual[cut:],
                                               req[cut:]))
    out = np.empty(len(kept) - cut)
    day, delta = None, 0.0
    for k, job in enumerate(kept[cut:]):
        if job.submit // 86400 != day:
            day, delta = job.submit // 86400, calib.delta(job.submit)
        out[k] = delta
    return out


def evaluate(jobs: Sequence[JobRecord], quantile: float = 0.9, train_share: float = 0.7,
             keep_predictions: bool = False, ablation: bool = False) -> dict[str, Any]:
    """Train on the first 70% (by submit) of the evaluable jobs, test on the rest.

    History features use every job that ended before a job's submit, train or test.
    ``ablation`` adds what the served model's two choices are worth: ``model_l2`` (L2 instead
    of L1, still from last2), ``model_l2_plain`` (L2 from nothing: the issue's reference
    LightGBM) and ``model_q_static`` (the upper model's delta fixed at training time instead
    of recalibrated daily).
    """
    kept = sorted((j for j in jobs if evaluable(j)), key=lambda j: j.submit)
    excluded = len(jobs) - len(kept)
    if len(kept) < 100:
        raise ArnoldError(f"only {len(kept)} jobs have a run time and a requested time; "
                          "evaluation needs at least 100")
    cut = int(len(kept) * train_share)
    vocab = Vocabulary(kept[:cut])
    matrix, last2 = compute(kept, vocab)
    actual = np.array([runtime(j) for j in kept], dtype=float)
    req = np.array([float(j.time_limit or 0) for j in kept])
    model = train(matrix[:cut], actual[:cut], vocab, req=req[:cut], quantile=quantile)
    point, upper = model.predict(matrix[cut:], list(req[cut:]),
                                 delta=daily_deltas(model, kept, matrix, cut, actual, req))
    test_req = req[cut:]
    base_last2 = np.array([min(v, r) if v is not None else r
                           for v, r in zip(last2[cut:], test_req, strict=True)])
    test_actual = actual[cut:]
    result: dict[str, Any] = {
        "n_train": cut, "n_test": len(kept) - cut, "n_excluded": excluded,
        "methods": {"requested": metrics(test_req, test_actual),
                    "last2": metrics(base_last2, test_actual),
                    "model": metrics(point, test_actual),
                    "model_q": metrics(upper, test_actual)},
        "train_seconds": round(float(model.meta["train_seconds"]), 2),
        # Test jobs that ran past their requested time (killed late, or limits raised): a
        # prediction capped at the request cannot cover them, so 1 minus this share bounds
        # any capped upper prediction's coverage.
        "test_outran_request": round(float(np.mean(test_actual > test_req)), 4),
    }
    if ablation:
        y = log_seconds(actual[:cut])
        fallback = float(model.meta["offset_fallback"])
        for name, from_last2 in (("model_l2", True), ("model_l2_plain", False)):
            booster = fit_point(matrix[:cut], y, fallback, objective="regression",
                                from_last2=from_last2)
            result["methods"][name] = metrics(
                predict_point(booster, matrix[cut:], list(test_req), fallback,
                              from_last2=from_last2), test_actual)
        static = model.predict(matrix[cut:], list(test_req))[1]
        result["methods"]["model_q_static"] = metrics(static, test_actual)
    if keep_predictions:
        result["predictions"] = {"actual": test_actual, "requested": test_req,
                                 "last2": base_last2, "model": point, "model_q": upper}
    return result
