"""``arnold predictor evaluate``: the time-ordered 70/30 split and the four methods."""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from predictor.features import Vocabulary, compute, runtime
from predictor.model import (
    ACI_GAMMA,
    ACI_GAMMAS,
    ACI_MARGIN,
    CALIBRATION_WINDOW,
    AdaptiveCalibrator,
    JctModel,
    PointEnsemble,
    aci_aim,
    conformal_delta,
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
    """The upper model's conformal delta for each test job, the plain way (an ablation):
    once per day, the q-quantile of the most recent scores of jobs that had ended by then
    (the training window's calibration jobs, scored by the model that did not see them, and
    test jobs, scored by the served model). Nothing that ends after the submit is used."""
    quantile = float(model.meta["quantile"])
    start = int(model.meta["calibration_start"])
    ends = [float(j.end or 0) for j in kept]
    window = [(ends[start + i], float(v)) for i, v in enumerate(model.calibration_scores)] \
        if model.calibration_scores is not None else []
    test = conformity_scores(model.raw_upper(matrix[cut:]), actual[cut:], req[cut:],
                             model.grace)
    window = sorted(window + [(ends[cut + k], float(v)) for k, v in enumerate(test)])
    out = np.empty(len(kept) - cut)
    day, delta, taken = None, 0.0, 0
    recent: list[float] = []
    for k, job in enumerate(kept[cut:]):
        if job.submit // 86400 != day:
            day = job.submit // 86400
            while taken < len(window) and window[taken][0] <= job.submit:
                recent.append(window[taken][1])
                taken += 1
            delta = conformal_delta(np.asarray(recent[-CALIBRATION_WINDOW:]), quantile)
        out[k] = delta
    return out


def adaptive_deltas(model: JctModel, kept: Sequence[JobRecord], matrix: np.ndarray, cut: int,
                    actual: np.ndarray, req: np.ndarray, gamma: float = ACI_GAMMA,
                    margin: float = ACI_MARGIN) -> np.ndarray:
    """The served upper model's delta for each test job, as the live system keeps it.

    At each submit, every job that has ended since the last one enters the
    :class:`AdaptiveCalibrator` in end order, with whether the delta it was served missed it
    (test jobs) or not (the training window's calibration jobs, which seed the window); the
    job is then served the calibrator's delta (``gamma``: its step; ``margin``: how far
    above the quantile it aims). Nothing that ends after
    the submit is used, and a test job is fed back only after it was served (a log's start
    can precede its submit).
    """
    calib = AdaptiveCalibrator(float(model.meta["quantile"]), gamma=gamma,
                               alpha=_level(model, margin), margin=margin)
    start = int(model.meta["calibration_start"])
    seed: list[tuple[float, float]] = []
    if model.calibration_scores is not None:
        seed = sorted((float(kept[start + i].end or 0), float(score))
                      for i, score in enumerate(model.calibration_scores))
    scores = conformity_scores(model.raw_upper(matrix[cut:]), actual[cut:], req[cut:],
                               model.grace)
    out = np.empty(len(kept) - cut)
    served: list[tuple[float, int]] = []  # (end, test index), a heap
    taken = 0
    for k, job in enumerate(kept[cut:]):
        while taken < len(seed) and seed[taken][0] <= job.submit:
            calib.add(seed[taken][1])
            taken += 1
        while served and served[0][0] <= job.submit:
            _, index = heapq.heappop(served)
            # An infinite score (the job outran its request by more than the grace) is a miss
            # even when the delta served was infinite too: the prediction is capped there.
            calib.adapt(bool(math.isinf(scores[index]) or scores[index] > out[index]))
            calib.add(float(scores[index]))
        out[k] = calib.delta
        heapq.heappush(served, (float(job.end or 0), k))
    return out


def _level(model: JctModel, margin: float) -> float | None:
    """The level the calibrator starts from: the model's, moved to another ``margin``'s aim."""
    alpha = model.meta.get("upper_alpha")
    quantile = float(model.meta["quantile"])
    return None if alpha is None else \
        float(alpha) + aci_aim(quantile, margin) - aci_aim(quantile)


def evaluate(jobs: Sequence[JobRecord], quantile: float = 0.9, train_share: float = 0.7,
             keep_predictions: bool = False, ablation: bool = False) -> dict[str, Any]:
    """Train on the first 70% (by submit) of the evaluable jobs, test on the rest.

    History features use every job that ended before a job's submit, train or test.
    ``ablation`` adds what the served model's choices are worth: ``model_l2`` (L2 instead
    of L1, still from last2), ``model_l2_plain`` (L2 from nothing: the issue's reference
    LightGBM), ``model_q_static`` (the upper model's delta fixed at training time instead
    of adapted at each submit), ``model_q_daily`` (the q-quantile of the recent scores
    once a day, without adapting the level) and ``model_q_gamma_<g>`` (adapted with the other
    steps in ``ACI_GAMMAS``) and ``model_q_no_margin`` (aimed at the quantile itself,
    without ``ACI_MARGIN``).
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
                                 delta=adaptive_deltas(model, kept, matrix, cut, actual, req))
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
        # Each of the point model's boosters alone (seeds 1, 2, ...): how much one seed's luck
        # would have moved the served model's figure.
        "model_members_mae_log": [
            metrics(predict_point(PointEnsemble([member]), matrix[cut:], list(test_req),
                                  float(model.meta["offset_fallback"])), test_actual)["mae_log"]
            for member in model.point.members],
        "train_seconds": round(float(model.meta["train_seconds"]), 2),
        # Test jobs that ran past their requested time (killed late, or limits raised): a
        # prediction capped at the request cannot cover them, so 1 minus this share bounds
        # any capped upper prediction's coverage.
        "test_outran_request": round(float(np.mean(test_actual > test_req)), 4),
        # ... and those that ran past it by more than the upper model's grace: 1 minus this
        # share bounds model_q's coverage (its cap is the request plus the grace).
        "upper_grace_s": round(model.grace, 1),
        "test_outran_cap": round(float(np.mean(test_actual > test_req + model.grace)), 4),
    }
    if ablation:
        y = log_seconds(actual[:cut])
        fallback = float(model.meta["offset_fallback"])
        for name, from_baseline in (("model_l2", True), ("model_l2_plain", False)):
            booster = fit_point(matrix[:cut], y, fallback, objective="regression",
                                from_baseline=from_baseline)
            result["methods"][name] = metrics(
                predict_point(booster, matrix[cut:], list(test_req), fallback,
                              from_baseline=from_baseline), test_actual)
        static = model.predict(matrix[cut:], list(test_req))[1]
        result["methods"]["model_q_static"] = metrics(static, test_actual)
        daily = model.predict(matrix[cut:], list(test_req),
                              delta=daily_deltas(model, kept, matrix, cut, actual, req))[1]
        result["methods"]["model_q_daily"] = metrics(daily, test_actual)
        for gamma in ACI_GAMMAS:
            if gamma != ACI_GAMMA:
                other = model.predict(matrix[cut:], list(test_req), delta=adaptive_deltas(
                    model, kept, matrix, cut, actual, req, gamma))[1]
                result["methods"][f"model_q_gamma_{gamma:g}"] = metrics(other, test_actual)
        bare = model.predict(matrix[cut:], list(test_req), delta=adaptive_deltas(
            model, kept, matrix, cut, actual, req, margin=0.0))[1]
        result["methods"]["model_q_no_margin"] = metrics(bare, test_actual)
    if keep_predictions:
        result["predictions"] = {"actual": test_actual, "requested": test_req,
                                 "last2": base_last2, "model": point, "model_q": upper}
    return result
