"""Run-time predictors inside the simulation, trained online.

Every predictor learns only from jobs that have *ended in the simulation* before the current
simulated time (not from the log's own timeline, whose schedule differs): ``observe_end`` is
the only way a runtime gets in, and the simulator calls it when a job ends. Feature rows are
computed at each job's submit from the simulated state then (the user's finished jobs, the
jobs active and running), exactly as a live system would.

``model`` and ``model_q`` look at the first event of each simulated day (the live retrain is
a nightly cron job) and retrain on the most recent ``window`` finished jobs when enough new
ones have finished since the last fit (``RETRAIN_SHARE`` of the training set): a quiet day
does not pay for a fit that would learn nothing new. ``model`` fits only the point model,
``model_q`` only the upper one, because each uses only its own. ``model_q``'s conformal delta
follows every job that ends, like ``arnold predictor evaluate`` does (an
:class:`~predictor.model.AdaptiveCalibrator`): the job's score against the model that predicted
it (out of sample, unlike a split of the training window) enters the window, and whether the
prediction it started with covered it moves the level; only the first fit, with no such jobs
yet, seeds the window from a held-out tail of its training window. Until that first fit
``model_q`` predicts the time limit, as the live side does without a model; ``model`` falls
back to the user's last two.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from predictor.features import FEATURES, UserHistory, Vocabulary, fill_row
from predictor.model import (
    AdaptiveCalibrator,
    baseline_log,
    conformity_scores,
    fit_point,
    fit_upper,
    log_seconds,
)
from slurm_arnold.sim import PREDICTORS
from slurm_arnold.sim.jobs import SimJob

#: Retrain when the jobs finished since the last fit are at least this share of the training
#: set (and at least ``min_new``): 5% of a full 20,000-job window is 1,000 jobs.
RETRAIN_SHARE = 0.05
#: Jobs held out of the first fit to calibrate it (later fits use out-of-sample scores).
FIRST_HOLDOUT = 0.15
#: LightGBM threads per replay: one, so replays run side by side (a sweep, a job array)
#: without OpenMP threads spinning against each other on the same cores.
THREADS = 1


@dataclass
class OnlinePredictor:
    """Predicts a job's run time (seconds, capped at its limit) from what has ended so far."""

    name: str
    quantile: float = 0.9
    window: int = 20_000
    rounds: int = 100
    min_train: int = 200
    histories: dict[str, UserHistory] = field(default_factory=lambda: defaultdict(
        UserHistory.new))
    vocab: Vocabulary = field(default_factory=Vocabulary)
    rows: dict[int, np.ndarray] = field(default_factory=dict)
    finished: list[SimJob] = field(default_factory=list)
    min_new: int = 100
    #: The booster in use (point for ``model``, upper for ``model_q``) and its starting score.
    booster: Any = None
    offset_fallback: float = 0.0
    delta: float = 0.0
    version: int = 0
    last_day: int | None = None
    trained_on: int = 0  # finished jobs seen when the booster was fitted
    retrains: int = 0
    #: For the leakage test: (simulated time, latest end among the training jobs) per retrain.
    audit: list[tuple[float, float]] = field(default_factory=list)
    #: ``model_q``'s delta: conformity scores (log actual - raw upper) of jobs that ended,
    #: out of sample, and the level adapted to its misses.
    calibrator: AdaptiveCalibrator | None = None
    _cache: dict[int, tuple[int, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.name not in PREDICTORS:
            raise ValueError(f"unknown predictor {self.name!r}; use one of {', '.join(PREDICTORS)}")
        if self.name == "model_q":
            self.calibrator = AdaptiveCalibrator(self.quantile)

    @property
    def learns(self) -> bool:
        """Whether this predictor trains a model."""
        return self.name in ("model", "model_q")

    def observe_submit(self, job: SimJob, *, user_active: int, active: int, running: int,
                       user_running: Sequence[tuple[float, int | None]] = ()) -> None:
        """Record the job's submit-time features (model predictors only); ``user_running``:
        (start, time limit) of the user's jobs running in the simulation then."""
        if not self.learns:
            return
        self.vocab.add(job.record)
        row = np.full(len(FEATURES), math.nan)
        fill_row(row, job.record, self.histories[job.user], self.vocab,
                 user_active=user_active, active=active, running=running,
                 user_running=user_running)
        self.rows[job.index] = row

    def observe_end(self, job: SimJob) -> None:
        """A job ended in the simulation: its run time may now be learnt (killed jobs'
        true run times are unknown, so they only count as history, not as labels)."""
        assert job.start is not None and job.end is not None
        runtime = job.end - job.start
        self.histories[job.user].add(
            runtime, job.record.time_limit, size=job.record.procs or job.record.gpus,
            state="TIMEOUT" if job.killed else job.record.state, end=job.end)
        self._calibrate(job, runtime)
        if self.learns and not job.killed:
            self.finished.append(job)
            if len(self.finished) > 2 * self.window:
                drop = len(self.finished) - self.window
                del self.finished[:drop]
                self.trained_on -= drop

    def maybe_retrain(self, now: float) -> None:
        """At the first event of each simulated day: recalibrate, and retrain when enough
        new jobs have finished (see the module docstring)."""
        if not self.learns:
            return
        day = int(now // 86400)
        if day == self.last_day:
            return
        self.last_day = day
        recent = self.finished[-self.window:]
        new = len(self.finished) - self.trained_on
        if len(recent) < self.min_train or (
                self.booster is not None
                and new < max(self.min_new, RETRAIN_SHARE * len(recent))):
            return
        matrix = np.stack([self.rows[j.index] for j in recent])
        runtimes = np.array([max(1.0, (j.end or 0) - (j.start or 0)) for j in recent])
        y = log_seconds(runtimes)
        if self.name == "model":
            self.offset_fallback = float(np.mean(y))
            # One booster, not the served ensemble (POINT_SEEDS): a replay refits every few
            # simulated days, and the ensemble buys steadiness across seeds, not a schedule.
            self.booster = fit_point(matrix, y, self.offset_fallback, rounds=self.rounds,
                                     threads=THREADS, seeds=1)
        else:
            if self.booster is None:
                self._first_calibration(matrix, y, runtimes,
                                        np.array([j.limit for j in recent]))
            self.booster = fit_upper(matrix, y, self.quantile, rounds=self.rounds,
                                     threads=THREADS)
        self.trained_on = len(self.finished)
        self.version += 1
        self.retrains += 1
        self.audit.append((now, max(j.end or 0 for j in recent)))

    def _first_calibration(self, matrix: np.ndarray, y: np.ndarray, runtimes: np.ndarray,
                           limits: np.ndarray) -> None:
        """The first fit's window: a model on the head of the training set predicts its tail."""
        assert self.calibrator is not None
        split = int(len(y) * (1 - FIRST_HOLDOUT))
        early = fit_upper(matrix[:split], y[:split], self.quantile, rounds=self.rounds,
                          threads=THREADS)
        raw = np.asarray(early.predict(matrix[split:]), dtype=float)
        for score in conformity_scores(raw, runtimes[split:], limits[split:]):
            self.calibrator.add(float(score))
        self.delta = self.calibrator.delta

    def _calibrate(self, job: SimJob, runtime: float) -> None:
        """``model_q``: a job the model predicted ended; its score enters the window (a killed
        job's run time is unknown, so only its miss counts) and its miss moves the level."""
        served = self._cache.get(job.index)
        if self.calibrator is None or served is None or job.predicted is None:
            return  # not served by the model (it had not trained yet)
        self.calibrator.adapt(job.killed or runtime > job.predicted + 1e-6)
        if not job.killed:
            score = conformity_scores(np.array([served[1]]), np.array([max(1.0, runtime)]),
                                      np.array([job.limit]))
            self.calibrator.add(float(score[0]))
        self.delta = self.calibrator.delta

    def predict(self, job: SimJob) -> float:
        """Predicted run time (s), capped at the job's limit."""
        if self.name == "requested" or (self.name == "model_q" and self.booster is None):
            # Before its first fit the upper predictor has nothing calibrated to offer; only
            # the limit keeps its promise (the live side gates on limits without a model:
            # predictor/live.py); last2, a point guess, covers about half the jobs
            # (`arnold bench predictor`, docs/benchmarks.md).
            return job.limit
        if self.name == "oracle":
            return job.runtime
        if self.name == "last2" or self.booster is None:
            # The point model falls back to last2 until it has trained once.
            last2 = self.histories[job.user].last2_seconds() if job.user in self.histories \
                else None
            return job.limit if last2 is None else min(job.limit, max(1.0, last2))
        cached = self._cache.get(job.index)
        if cached and cached[0] == self.version:
            raw = cached[1]
        else:
            row = self.rows[job.index][None, :]
            raw = float(self.booster.predict(row, num_threads=THREADS)[0])
            if self.name == "model":
                raw += float(baseline_log(row, self.offset_fallback)[0])
            self._cache[job.index] = (self.version, raw)
        shift = self.delta if self.name == "model_q" else 0.0
        return float(min(job.limit, max(1.0, math.exp(raw + shift))))

    def forget(self, job: SimJob) -> None:
        """Drop per-job caches once a job can no longer be asked about."""
        self._cache.pop(job.index, None)
