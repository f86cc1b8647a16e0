"""Run-time predictors inside the simulation, trained online.

Every predictor learns only from jobs that have *ended in the simulation* before the current
simulated time (not from the log's own timeline, whose schedule differs): ``observe_end`` is
the only way a runtime gets in, and the simulator calls it when a job ends. ``model`` and
``model_q`` retrain once per simulated day on the most recent ``window`` finished jobs; their
feature rows are computed at each job's submit from the simulated state then (the user's
finished jobs, the jobs active and running), exactly as a live system would.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from predictor.features import FEATURES, UserHistory, Vocabulary, fill_row
from predictor.model import JctModel, ModelError, train
from slurm_arnold.sim import PREDICTORS
from slurm_arnold.sim.jobs import SimJob


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
    model: JctModel | None = None
    version: int = 0
    last_day: int | None = None
    retrains: int = 0
    #: For the leakage test: (simulated time, latest end among the training jobs) per retrain.
    audit: list[tuple[float, float]] = field(default_factory=list)
    _cache: dict[int, tuple[int, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.name not in PREDICTORS:
            raise ValueError(f"unknown predictor {self.name!r}; use one of {', '.join(PREDICTORS)}")

    @property
    def learns(self) -> bool:
        """Whether this predictor trains a model."""
        return self.name in ("model", "model_q")

    def observe_submit(self, job: SimJob, *, user_active: int, active: int,
                       running: int) -> None:
        """Record the job's submit-time features (model predictors only)."""
        if not self.learns:
            return
        self.vocab.add(job.record)
        row = np.full(len(FEATURES), math.nan)
        fill_row(row, job.record, self.histories[job.user], self.vocab,
                 user_active=user_active, active=active, running=running)
        self.rows[job.index] = row

    def observe_end(self, job: SimJob) -> None:
        """A job ended in the simulation: its run time may now be learnt (killed jobs'
        true run times are unknown, so they only count as history, not as labels)."""
        assert job.start is not None and job.end is not None
        runtime = job.end - job.start
        self.histories[job.user].add(runtime, job.record.time_limit)
        if self.learns and not job.killed:
            self.finished.append(job)
            if len(self.finished) > 2 * self.window:
                del self.finished[: len(self.finished) - self.window]

    def maybe_retrain(self, now: float) -> None:
        """Retrain at the first event of each simulated day."""
        if not self.learns:
            return
        day = int(now // 86400)
        if day == self.last_day:
            return
        self.last_day = day
        recent = self.finished[-self.window:]
        if len(recent) < self.min_train:
            return
        matrix = np.stack([self.rows[j.index] for j in recent])
        runtimes = np.array([max(1.0, (j.end or 0) - (j.start or 0)) for j in recent])
        limits = np.array([j.limit for j in recent])
        try:
            self.model = train(matrix, runtimes, self.vocab, req=limits,
                               quantile=self.quantile, rounds=self.rounds)
        except ModelError:
            return
        self.version += 1
        self.retrains += 1
        self.audit.append((now, max(j.end or 0 for j in recent)))

    def predict(self, job: SimJob) -> float:
        """Predicted run time (s), capped at the job's limit."""
        if self.name == "requested":
            return job.limit
        if self.name == "oracle":
            return job.runtime
        if self.name == "last2" or self.model is None:
            # A model predictor falls back to last2 until it has trained once.
            last2 = self.histories[job.user].last2_seconds() if job.user in self.histories \
                else None
            return job.limit if last2 is None else min(job.limit, max(1.0, last2))
        cached = self._cache.get(job.index)
        if cached and cached[0] == self.version:
            return cached[1]
        row = self.rows[job.index][None, :]
        point, upper = self.model.predict(row, [job.limit])
        value = float(upper[0] if self.name == "model_q" else point[0])
        self._cache[job.index] = (self.version, value)
        return value

    def forget(self, job: SimJob) -> None:
        """Drop per-job caches once a job can no longer be asked about."""
        self._cache.pop(job.index, None)
