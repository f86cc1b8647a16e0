"""What a replay measured of its jobs: utilisation, waits, bounded slowdown, the LPJs' waits
and spreads, and how good the run-time predictions were."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from slurm_arnold.sim.jobs import SimJob

BSLD_TAU = 10.0  # seconds: the bounded-slowdown floor for very short jobs


def job_metrics(jobs: Sequence[SimJob], total_gpus: int,
                lpj_spreads: Sequence[float]) -> dict[str, float]:
    """Utilisation (busy GPU-time over the span from the first submit to the last end), mean
    wait, bounded slowdown, the LPJs' mean and p95 wait and mean weighted spread
    (``lpj_spreads``, one per LPJ)."""
    waits = np.array([(j.start or 0) - j.submit for j in jobs]) / 3600.0
    runs = np.array([(j.end or 0) - (j.start or 0) for j in jobs])
    bsld = np.maximum(1.0, (waits * 3600 + runs) / np.maximum(runs, BSLD_TAU))
    first = min((j.submit for j in jobs), default=0.0)
    last = max((j.end or 0 for j in jobs), default=0.0)
    used = float(sum(((j.end or 0) - (j.start or 0)) * j.gpus_each * len(j.node_ids)
                     for j in jobs))
    span = max(last - first, 1e-9)
    lpj = [j for j in jobs if j.lpj]
    lpj_waits = np.array([(j.start or 0) - j.submit for j in lpj]) / 3600.0
    return {
        "utilization": round(used / (total_gpus * span), 6) if jobs else 0.0,
        "mean_wait_h": round(float(waits.mean()), 6) if jobs else 0.0,
        "bounded_slowdown": round(float(bsld.mean()), 6) if jobs else 0.0,
        "lpj_mean_wait_h": round(float(lpj_waits.mean()), 6) if lpj else 0.0,
        "lpj_p95_wait_h": round(float(np.quantile(lpj_waits, 0.95)), 6) if lpj else 0.0,
        "lpj_mean_weighted_spread": round(float(np.mean(lpj_spreads)), 6) if lpj else 0.0,
    }


def prediction_accuracy(jobs: Sequence[SimJob]) -> dict[str, float | None]:
    """How good the run-time predictions were when jobs started (jobs that were not killed):
    mean |log predicted - log actual| and the share that ended by their prediction (the
    coverage an upper predictor promises)."""
    done = [j for j in jobs if j.predicted is not None and not j.killed
            and j.end is not None and j.start is not None]
    if not done:
        return {"predictor_mae_log": None, "predictor_coverage": None}
    actual = np.maximum(1.0, np.array([(j.end or 0) - (j.start or 0) for j in done]))
    predicted = np.maximum(1.0, np.array([j.predicted or 1.0 for j in done]))
    return {"predictor_mae_log": round(float(np.mean(np.abs(np.log(predicted)
                                                             - np.log(actual)))), 6),
            "predictor_coverage": round(float(np.mean(actual <= predicted + 1e-6)), 6)}
