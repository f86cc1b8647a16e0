"""``arnold predictor evaluate``: the time-ordered 70/30 split and the four methods."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from predictor.features import Vocabulary, compute, runtime
from predictor.model import metrics, train
from predictor.swf import JobRecord
from slurm_arnold.errors import ArnoldError


def evaluable(job: JobRecord) -> bool:
    """Jobs with run time > 0 and requested time > 0 are evaluated."""
    rt = runtime(job)
    return rt is not None and rt > 0 and bool(job.time_limit and job.time_limit > 0)


def evaluate(jobs: Sequence[JobRecord], quantile: float = 0.9,
             train_share: float = 0.7) -> dict[str, Any]:
    """Train on the first 70% (by submit) of the evaluable jobs, test on the rest.

    History features use every job that ended before a job's submit, train or test.
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
    model = train(matrix[:cut], actual[:cut], vocab, quantile=quantile)
    point, upper = model.predict(matrix[cut:], list(req[cut:]))
    test_req = req[cut:]
    base_last2 = np.array([min(v, r) if v is not None else r
                           for v, r in zip(last2[cut:], test_req, strict=True)])
    test_actual = actual[cut:]
    return {
        "n_train": cut, "n_test": len(kept) - cut, "n_excluded": excluded,
        "methods": {"requested": metrics(test_req, test_actual),
                    "last2": metrics(base_last2, test_actual),
                    "model": metrics(point, test_actual),
                    "model_q": metrics(upper, test_actual)},
        "train_seconds": round(float(model.meta["train_seconds"]), 2),
    }
