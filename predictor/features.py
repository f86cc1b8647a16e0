"""Features known at submit time, computed without leakage.

Jobs are processed in submit order. Before job i's features are computed, every job that had
*ended* by job i's submit time enters its user's history; nothing else does, so a feature never
sees a job that ended after the submit it describes (``tests/test_predictor.py`` checks it).

| feature | meaning |
|---|---|
| `log_req` | log of the requested time limit (s) |
| `log_procs` | log of processors (or GPUs) asked for |
| `queue`, `partition` | categorical codes (unknown values map to missing) |
| `u_last1` | log runtime of the user's most recently finished job |
| `u_last2` | log of the mean runtime of the user's last two finished jobs |
| `u_last5` | mean log runtime of the user's last five |
| `u_same_req` | log runtime of the user's last finished job with the same requested time |
| `u_ratio5` | mean runtime / requested time over the user's last five |
| `u_last_req_eq` | 1 when the user's last finished job asked for the same time |
| `u_count` | log(1 + finished jobs of the user so far) |
| `u_active` | the user's jobs submitted and not yet ended at submit |
| `active`, `running` | jobs in the system (submitted, not ended) and running at submit |
| `hour`, `weekday` | time of day and day of week of the submit (UTC) |
| `u_last_state` | how the user's last job ended: 0 completed, 1 failed, 2 cancelled, 3 timed out |
| `u_since_end` | log(1 + s since the user's last job ended): quick resubmits follow failures |
| `u_same_sig` | log runtime of the user's last finished job with the same requested time and size |
| `u_med10` | median log runtime of the user's last ten |
| `u_limit_share` | share of the user's last ten that ran to at least 95% of their requested time |
| `u_last_procs_eq` | 1 when the user's last finished job had the same size |
| `u_run_elapsed` | log of how long the user's longest-running job still running has run |
| `u_run_same_elapsed` | the same among the user's running jobs with this job's time limit |
| `u_same_req_med` | median log runtime of the user's last five finished jobs with this time limit |
| `u_same_req_n` | log(1 + the user's finished jobs with this time limit) |
| `u_last_ratio` | runtime / requested time of the user's last finished job |
| `u_req_change` | log of this job's time limit over the user's last finished job's |

The eight before the last four came after the first wave (``arnold bench predictor`` measures
them on the four shared logs, docs/benchmarks.md). The two ``u_run_*`` ones read jobs that are
still running at the submit: their elapsed time is known then (squeue shows it), and a job that
has already run three hours says more about its twin just submitted than any finished job.

The user and the group are not features, though every history feature is the user's: as
categorical codes they let the trees memorise the training window's users, whose habits drift
and half of whom a later month does not have (on SDSC-SP2 36% of the test jobs' users are
unseen). Without them the worst of the four logs' mae_log improves (``arnold bench predictor``,
docs/predictor.md says by how much).
"""

from __future__ import annotations

import heapq
import math
from bisect import insort
from collections import defaultdict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from predictor.swf import JobRecord

FEATURES = ("log_req", "log_procs", "queue", "partition", "u_last1", "u_last2", "u_last5",
            "u_same_req", "u_ratio5", "u_last_req_eq", "u_count", "u_active", "active",
            "running", "hour", "weekday", "u_last_state", "u_since_end", "u_same_sig",
            "u_med10", "u_limit_share", "u_last_procs_eq", "u_run_elapsed",
            "u_run_same_elapsed", "u_same_req_med", "u_same_req_n", "u_last_ratio",
            "u_req_change")
CATEGORICAL = ("queue", "partition")
NAN = float("nan")
#: ``u_last_state`` codes by the first word of the state (Slurm's or the SWF reader's);
#: anything else (node failure, out of memory, partial) counts as failed, unknown as missing.
STATE_CODES = {"COMPLETED": 0.0, "FAILED": 1.0, "CANCELLED": 2.0, "TIMEOUT": 3.0,
               "DEADLINE": 3.0, "UNKNOWN": NAN}
LONG_HISTORY = 10


@dataclass
class UserHistory:
    """What has been seen of one user's finished jobs (most recent last)."""

    runtimes: deque[float]
    reqs: deque[int | None]
    last_by_req: dict[int | None, float]
    last_by_signature: dict[tuple[int | None, int | None], float]
    log_runtimes: deque[float]  # the last LONG_HISTORY
    sorted_logs: list[float]  # the same, sorted (their median is a feature)
    limit_hits: deque[float]  # the last LONG_HISTORY: 1.0 when it ran to >= 95% of its limit
    count: int = 0
    last_state: float = NAN
    last_end: float = NAN
    last_size: int | None = None
    #: The last five log runtimes per requested time, and how many finished per requested time.
    by_req: dict[int | None, deque[float]] = field(default_factory=dict)
    req_counts: dict[int | None, int] = field(default_factory=dict)

    @classmethod
    def new(cls) -> UserHistory:
        """An empty history."""
        return cls(deque(maxlen=5), deque(maxlen=5), {}, {}, deque(maxlen=LONG_HISTORY), [],
                   deque(maxlen=LONG_HISTORY))

    def add(self, runtime: float, req: int | None, *, size: int | None = None,
            state: str = "UNKNOWN", end: float | None = None) -> None:
        """A job of this user finished (``size``: processors or GPUs; ``state``: how it
        ended, Slurm's word; ``end``: when, epoch seconds)."""
        self.runtimes.append(runtime)
        self.reqs.append(req)
        self.last_by_req[req] = runtime
        self.last_by_signature[(req, size)] = runtime
        insort(self.sorted_logs, _log(runtime))
        if len(self.log_runtimes) == LONG_HISTORY:
            self.sorted_logs.remove(self.log_runtimes[0])
        self.log_runtimes.append(_log(runtime))
        self.limit_hits.append(float(bool(req) and runtime >= 0.95 * (req or 0)))
        self.count += 1
        words = state.split()
        self.last_state = STATE_CODES.get(words[0] if words else "UNKNOWN", 1.0)
        self.last_end = float(end) if end is not None else NAN
        self.last_size = size
        self.by_req.setdefault(req, deque(maxlen=5)).append(_log(runtime))
        self.req_counts[req] = self.req_counts.get(req, 0) + 1

    def last2_seconds(self) -> float | None:
        """Mean runtime of the last two (the last alone when there is one)."""
        if not self.runtimes:
            return None
        last = list(self.runtimes)[-2:]
        return sum(last) / len(last)


def runtime(job: JobRecord) -> float | None:
    """Run time in seconds, when known."""
    if job.start is None or job.end is None:
        return None
    return float(job.end - job.start)


def _log(x: float | None) -> float:
    return math.log(max(x, 1.0)) if x is not None else NAN


class Vocabulary:
    """Categorical codes fitted on training jobs (anything else becomes missing)."""

    def __init__(self, jobs: Sequence[JobRecord] = ()) -> None:
        self.codes: dict[str, dict[str, int]] = {c: {} for c in CATEGORICAL}
        for job in jobs:
            for name, value in zip(CATEGORICAL, _cats(job), strict=True):
                self.codes[name].setdefault(value, len(self.codes[name]))

    def add(self, job: JobRecord) -> None:
        """Give ``job``'s categorical values codes if they have none (codes never change)."""
        for name, value in zip(CATEGORICAL, _cats(job), strict=True):
            self.codes[name].setdefault(value, len(self.codes[name]))

    def code(self, name: str, value: str) -> float:
        """The code of ``value``, NaN when unseen."""
        code = self.codes[name].get(value)
        return NAN if code is None else float(code)


def _size(job: JobRecord) -> int | None:
    return job.procs or job.gpus


def _cats(job: JobRecord) -> tuple[str, str]:
    return job.qos, job.partition


def _median(ordered: Sequence[float]) -> float:
    n = len(ordered)
    if not n:
        return NAN
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def running_elapsed(t: float, time_limit: int | None,
                    running: Sequence[tuple[float, int | None]]) -> tuple[float, float]:
    """``u_run_elapsed`` and ``u_run_same_elapsed`` at time ``t`` from the user's running jobs
    as (start, time limit) pairs."""
    every = [t - start for start, _ in running if start <= t]
    same = [t - start for start, limit in running if start <= t and limit == time_limit]
    return (_log(max(every)) if every else NAN, _log(max(same)) if same else NAN)


def fill_row(row: np.ndarray, job: JobRecord, h: UserHistory, vocab: Vocabulary, *,
             user_active: float, active: float, running: float,
             user_running: Sequence[tuple[float, int | None]] = ()) -> float | None:
    """Write ``job``'s features into ``row`` from its user's history ``h`` (finished jobs
    only), the user's jobs running at its submit (``user_running``: (start, time limit)) and
    the load then; return the user's last-two mean (s), if any."""
    t = job.submit
    rts = list(h.runtimes)
    ratios = [r / q for r, q in zip(rts, h.reqs, strict=True) if q]
    row[0] = _log(job.time_limit)
    row[1] = _log(_size(job))
    for c, (name, value) in enumerate(zip(CATEGORICAL, _cats(job), strict=True)):
        row[2 + c] = vocab.code(name, value)
    row[4] = _log(rts[-1]) if rts else NAN
    last2 = h.last2_seconds()
    row[5] = _log(last2)
    row[6] = sum(_log(r) for r in rts) / len(rts) if rts else NAN
    row[7] = _log(h.last_by_req.get(job.time_limit))
    row[8] = sum(ratios) / len(ratios) if ratios else NAN
    row[9] = float(h.reqs[-1] == job.time_limit) if h.reqs else NAN
    row[10] = math.log1p(h.count)
    row[11] = float(user_active)
    row[12] = float(active)
    row[13] = float(running)
    row[14] = (t % 86400) / 3600.0
    row[15] = float((t // 86400 + 4) % 7)  # 1970-01-01 was a Thursday
    size = _size(job)
    row[16] = h.last_state
    row[17] = math.log1p(max(t - h.last_end, 0.0)) if not math.isnan(h.last_end) else NAN
    row[18] = _log(h.last_by_signature.get((job.time_limit, size)))
    row[19] = _median(h.sorted_logs)
    row[20] = sum(h.limit_hits) / len(h.limit_hits) if h.limit_hits else NAN
    row[21] = float(h.last_size == size) if h.count else NAN
    row[22], row[23] = running_elapsed(t, job.time_limit, user_running)
    same = h.by_req.get(job.time_limit)
    row[24] = _median(sorted(same)) if same else NAN
    row[25] = math.log1p(h.req_counts.get(job.time_limit, 0))
    row[26] = rts[-1] / h.reqs[-1] if rts and h.reqs[-1] else NAN
    row[27] = _log(job.time_limit) - _log(h.reqs[-1]) if h.reqs and h.reqs[-1] else NAN
    return last2


def compute(jobs: Sequence[JobRecord], vocab: Vocabulary) -> tuple[np.ndarray, list[float | None]]:
    """The feature matrix of ``jobs`` (sorted by submit inside) and each job's last2 baseline
    in seconds, both in the order of ``jobs``."""
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit, i))
    ends = np.sort(np.array([j.end for j in jobs if j.end is not None], dtype=float))
    starts_ended = np.sort(np.array([j.start for j in jobs if j.start is not None
                                     and j.end is not None], dtype=float))
    submits = np.sort(np.array([j.submit for j in jobs], dtype=float))
    histories: dict[str, UserHistory] = defaultdict(UserHistory.new)
    user_open: dict[str, list[int]] = defaultdict(list)  # heaps of end times of user's jobs
    user_started: dict[str, list[int]] = defaultdict(list)  # user's jobs not known to be over
    pending: list[tuple[int, int]] = []  # (end, index) of jobs not yet in a history
    for i, j in enumerate(jobs):
        if j.end is not None:
            pending.append((j.end, i))
    heapq.heapify(pending)
    matrix = np.full((len(jobs), len(FEATURES)), NAN)
    last2: list[float | None] = [None] * len(jobs)
    for i in order:
        job = jobs[i]
        t = job.submit
        while pending and pending[0][0] <= t:
            _, k = heapq.heappop(pending)
            done = jobs[k]
            rt = runtime(done)
            if rt is not None:
                histories[done.user].add(rt, done.time_limit, size=_size(done),
                                         state=done.state, end=done.end)
        h = histories[job.user]
        opened = user_open[job.user]
        while opened and opened[0] <= t:
            heapq.heappop(opened)
        ended = float(np.searchsorted(ends, t, side="right"))
        active = float(np.searchsorted(submits, t, side="right")) - ended
        running = float(np.searchsorted(starts_ended, t, side="right")) - ended
        started = user_started[job.user]
        started[:] = [k for k in started if (end := jobs[k].end) is None or end > t]
        user_running = [(float(begin), jobs[k].time_limit) for k in started
                        if (begin := jobs[k].start) is not None and begin <= t]
        last2[i] = fill_row(matrix[i], job, h, vocab, user_active=len(opened), active=active,
                            running=running, user_running=user_running)
        if job.end is not None:
            heapq.heappush(opened, job.end)
        if job.start is not None:
            started.append(i)
    return matrix, last2


def compute_one(job: JobRecord, history: Sequence[JobRecord], vocab: Vocabulary,
                load: Mapping[str, float] | None = None) -> np.ndarray:
    """The feature row of one new job (submitted at ``job.submit``) given the finished history.

    Only the user's own jobs go through :func:`compute` (fast). The load columns (``active``,
    ``running``, ``u_active``) come from ``load`` when given (the live queue: a history of
    finished jobs knows nothing of what is queued now), else from the history as of the submit.
    """
    own = [h for h in history if h.user == job.user]
    matrix, _ = compute([*own, job], vocab)
    row: np.ndarray = matrix[-1].copy()
    if load is not None:
        for name, value in load.items():
            row[FEATURES.index(name)] = value
        return row
    t = job.submit
    ended = sum(1 for h in history if h.end is not None and h.end <= t)
    row[FEATURES.index("active")] = sum(1 for h in history if h.submit <= t) - ended
    row[FEATURES.index("running")] = sum(1 for h in history if h.start is not None
                                         and h.start <= t and h.end is not None) - ended
    return row
