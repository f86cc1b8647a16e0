"""Run-time predictions of the jobs in Slurm's queue now, as the live side gates and plans by
them: the serving model's upper quantile where there is one, else each job's time limit."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence

from predictor.features import compute_one
from predictor.history import load_history
from predictor.model import JctModel, ModelError
from predictor.swf import JobRecord
from site_config import SiteConfig
from slurm_arnold.slurm import JobInfo
from slurm_arnold.state import StateDB

log = logging.getLogger(__name__)


class LivePredictor:
    """Upper-quantile run-time predictions of live jobs: the serving model when there is one,
    else each job's time limit (``requested``)."""

    def __init__(self, config: SiteConfig, state: StateDB | None,
                 jobs: Sequence[JobInfo]) -> None:
        """``state`` is the site's database (opened read-only on first need when ``None``)."""
        self.config = config
        self._loaded = False
        self._model: JctModel | None = None
        self._name = "requested"
        self.state = state
        self.jobs = jobs
        self._history: dict[str, list[JobRecord]] = {}
        self._cache: dict[int, tuple[float, float]] = {}

    def _load(self) -> None:
        """The serving model, read on first use (most calls never need it)."""
        if self._loaded:
            return
        self._loaded = True
        if self.config.reservation.predictor == "model_q":
            from predictor.service import load_serving

            try:
                self._model = load_serving(self.config)
                self._name = "model_q"
            except ModelError as exc:
                log.warning("%s; gating on time limits instead", exc)

    @property
    def model(self) -> JctModel | None:
        """The serving model, or ``None`` (gate on time limits)."""
        self._load()
        return self._model

    @property
    def name(self) -> str:
        """``model_q`` or ``requested``: what the predictions are."""
        self._load()
        return self._name

    def predict(self, job: JobInfo) -> tuple[float, float]:
        """(point, upper) predicted run time in seconds; both the limit without a model."""
        cached = self._cache.get(job.job_id)
        if cached is not None:
            return cached
        limit = float(job.time_limit_min * 60) if job.time_limit_min else math.inf
        if self.model is None:
            out = (limit, limit)
        else:
            from predictor.service import queue_load

            history = self._history.get(job.user)
            if history is None:
                if self.state is None:
                    from slurm_arnold.site_state import open_site_db

                    self.state = open_site_db(self.config)
                history = self._history[job.user] = load_history(self.state, user=job.user)
            submit = job.submit_time or int(time.time())
            record = JobRecord(str(job.job_id), job.user, "", job.partition, "", job.name,
                               submit, None, None, job.node_count or None, job.gpus or None,
                               None, job.time_limit_min * 60 if job.time_limit_min else None,
                               job.state, None)
            before = [h for h in history if (h.end or 0) <= submit]
            row = compute_one(record, before, self.model.vocab,
                              queue_load(self.jobs, job.user, exclude=job.job_id,
                                         time_limit=record.time_limit, now=submit))[None, :]
            point, upper = self.model.predict(row, [limit if math.isfinite(limit) else None])
            out = (float(point[0]), float(upper[0]))
        self._cache[job.job_id] = out
        return out
