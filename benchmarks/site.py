"""``arnold bench site``: the product at a site's size, with its daemons failing.

Many real Unix users submit a stream shaped like a shared SWF log (its jobs' sizes as the
simulator maps them, its time limits and run times scaled down, its arrivals squeezed so that
the queue grows deep), large jobs through ``arnold-sbatch`` (TP 8 x PP) and the rest through
plain ``sbatch``; the admin loop (``arnold reserve sync``, as root) runs every ``sync_every``
seconds. Faults are injected at seeded moments (``benchmarks.site_faults``). The same stream is
then replayed with plain ``sbatch`` only and no admin loop: the baseline. Afterwards every rule
of ``benchmarks.site_checks`` is checked from Slurm's commands and the SQLite files.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import site_checks
from benchmarks.multiuser import as_user, ensure_users, percentile, site_venv
from slurm_arnold.errors import ArnoldError

#: Job names of this bench start so (the arm's name follows), to find and clean them up.
PREFIX = "arnold-site-"


@dataclass(frozen=True)
class StreamJob:
    """One job of the stream: when it is submitted (seconds after the stream starts), by whom,
    how many whole nodes, its time limit (minutes) and how long it sleeps."""

    index: int
    at: float
    user: str
    nodes: int
    limit_min: int
    run_s: float
    large: bool

    @property
    def pp(self) -> int:
        """Pipeline stages of a large job (TP = one node of 8 GPUs), as the admin side
        assumes for a job whose layout it does not know."""
        from reservations.policy import lpj_layout

        return lpj_layout(self.nodes)[0]


def stream(log: str, data_dir: Path, jobs: int, cluster_nodes: int, users: Sequence[str],
           *, submit_s: float, work_s: float, large_nodes: int,
           skip: int = 0) -> list[StreamJob]:
    """``jobs`` jobs of the shared log ``log`` (after its first ``skip``) as a stream for a
    cluster of ``cluster_nodes`` nodes: sizes as the simulator maps them (whole nodes; jobs
    smaller than a node take one), arrivals spread over ``submit_s`` seconds keeping the log's
    gaps, run times and limits scaled so that the whole stream's work would keep every node
    busy for ``work_s`` seconds. The log's users map onto ``users`` in order of appearance."""
    from benchmarks.logs import LOGS
    from benchmarks.sim import read_log

    setup = next((s for s in LOGS if s.name == log), None)
    if setup is None:
        raise ArnoldError(f"unknown log {log!r}; use one of {', '.join(s.name for s in LOGS)}")
    if not (data_dir / setup.file).exists():
        raise ArnoldError(f"{setup.file} is not in {data_dir}; pass --data DIR")
    picked = []
    for rec in read_log(data_dir, setup, None, skip):
        procs = rec.procs or rec.gpus or 0
        ran = (rec.end or 0) - (rec.start or 0)
        if procs <= 0 or ran <= 0 or rec.time_limit is None or rec.time_limit <= 0:
            continue
        gpus = math.ceil(procs * setup.gpus_per_proc - 1e-9)
        nodes = max(1, math.ceil(gpus / 8))
        if nodes > cluster_nodes:
            continue
        picked.append((rec.submit, rec.user, nodes, float(rec.time_limit), float(ran)))
        if len(picked) == jobs:
            break
    if len(picked) < jobs:
        raise ArnoldError(f"{log} has only {len(picked)} usable jobs after the first {skip}; "
                          "ask for fewer with --jobs")
    first, last = picked[0][0], picked[-1][0]
    squeeze = submit_s / max(1.0, last - first)
    work = sum(nodes * min(run, limit) for _, _, nodes, limit, run in picked)
    scale = (cluster_nodes * work_s) / work
    owners: dict[str, str] = {}
    out = []
    for i, (submit, user, nodes, limit, run) in enumerate(picked):
        submit_at = float(submit)
        owner = owners.setdefault(user, users[len(owners) % len(users)])
        run_s = max(1.0, min(run, limit) * scale)
        # Slurm's limits are whole minutes: at least the run itself, never under a minute.
        limit_min = max(1, math.ceil(max(limit * scale, run_s + 1) / 60))
        out.append(StreamJob(i, (submit_at - first) * squeeze, owner, nodes, limit_min,
                             round(run_s, 1), nodes >= large_nodes))
    return out


@dataclass
class Submitted:
    """What one submission of the stream gave: the job id (None: it failed every try), the
    command's wall time, and how many tries it took."""

    job: StreamJob
    job_id: int | None
    seconds: float
    tries: int
    late_s: float
    error: str = ""


@dataclass
class SyncPass:
    """One ``arnold reserve sync``: when (seconds into the run), how long, its exit status
    and what it wrote on stderr; ``killed`` when a fault killed it."""

    at: float
    seconds: float
    returncode: int
    stderr: str
    killed: bool = False
    stdout: str = ""


@dataclass
class Arm:
    """One replay of the stream (``arnold`` or the ``sbatch`` baseline) and what it gave."""

    name: str
    submitted: list[Submitted] = field(default_factory=list)
    passes: list[SyncPass] = field(default_factory=list)
    depth: list[tuple[float, int]] = field(default_factory=list)  # (t, jobs pending)
    started_at: float = 0.0
    findings: site_checks.Findings = field(default_factory=site_checks.Findings)
    faults: list[dict[str, Any]] = field(default_factory=list)
    #: Every failed try of a submission: (seconds into the run, the job's index, its stderr).
    failures: list[tuple[float, int, str]] = field(default_factory=list)


class Runner:
    """Runs the arms on the live cluster (root: users, the admin loop, the faults)."""

    def __init__(self, jobs: Sequence[StreamJob], *, sync_every: float, deadline_s: float,
                 large_gpus: int, progress: Callable[[str], None],
                 passes_log: Path | None = None) -> None:
        self.jobs = list(jobs)
        self.passes_log = passes_log
        self.sync_every = sync_every
        self.deadline_s = deadline_s
        self.progress = progress
        self.venv = site_venv()
        # Time limits serve as run-time predictions (the model's gate is the same code with
        # other numbers, and a fresh site has no model to load: its warning would be every
        # pass's first line).
        self.sync_env = {k: v for k, v in os.environ.items() if not k.startswith("ARNOLD_")} | {
            "ARNOLD_RESERVATION__LARGE_JOB_GPUS": str(large_gpus),
            "ARNOLD_RESERVATION__PREDICTOR": "requested"}
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.sync_proc: subprocess.Popen[str] | None = None

    # -- the stream ----------------------------------------------------------------------
    def _argv(self, arm: str, job: StreamJob) -> list[str]:
        name = f"{PREFIX}{arm}-{job.index}"
        common = ["--parsable", "-J", name, "-o", "/dev/null", "-N", str(job.nodes),
                  "--exclusive", "--gpus-per-node=8", "-t", str(job.limit_min),
                  "--wrap", f"sleep {job.run_s}"]
        if arm == "arnold" and job.large:
            return [str(self.venv / "bin" / "arnold-sbatch"), "--tp", "8", "--pp", str(job.pp),
                    "--ntasks-per-node=8", *common]
        return ["sbatch", *common]

    def _submit(self, arm: Arm, job: StreamJob) -> Submitted:
        late = time.monotonic() - arm.started_at - job.at
        argv = as_user(job.user, self._argv(arm.name, job))
        error = ""
        for tries in range(1, 13):
            t0 = time.perf_counter()
            proc = subprocess.run(argv, capture_output=True, text=True, cwd="/")
            seconds = time.perf_counter() - t0
            text = proc.stdout.strip().split(";")[0]
            if proc.returncode == 0 and text.isdigit():
                return Submitted(job, int(text), seconds, tries, late)
            # A controller that is down (a fault) refuses for a while: a user tries again.
            error = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            with self.lock:
                arm.failures.append((time.monotonic() - arm.started_at, job.index, proc.stderr))
            if self.stop.is_set():
                break
            time.sleep(10)
        return Submitted(job, None, seconds, tries, late, error)

    def _feed(self, arm: Arm, users: int) -> None:
        with ThreadPoolExecutor(max(4, users)) as pool:
            futures = []
            for job in self.jobs:
                wait = arm.started_at + job.at - time.monotonic()
                if wait > 0 and self.stop.wait(wait):
                    break
                futures.append(pool.submit(self._submit, arm, job))
            for f in futures:
                arm.submitted.append(f.result())

    # -- the admin loop ------------------------------------------------------------------
    def sync_once(self, arm: Arm, *,
                  killer: Callable[[subprocess.Popen[str]], bool] | None = None) -> SyncPass:
        """One ``arnold reserve sync`` (the site install's, as root); ``killer`` (a fault)
        watches the process and says whether it killed it."""
        with self.lock:
            t0 = time.perf_counter()
            proc = subprocess.Popen([str(self.venv / "bin" / "arnold"), "reserve", "sync"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, env=self.sync_env, cwd="/")
            self.sync_proc = proc
            killed = False
            try:
                if killer is not None:
                    killed = killer(proc)
                out, err = proc.communicate(timeout=600)
            finally:
                self.sync_proc = None
            done = SyncPass(time.monotonic() - arm.started_at, time.perf_counter() - t0,
                            proc.returncode, err, killed, out)
        arm.passes.append(done)
        if self.passes_log is not None:
            with self.passes_log.open("a") as f:
                f.write(json.dumps({"arm": arm.name, "at_s": round(done.at, 1),
                                    "seconds": round(done.seconds, 3),
                                    "returncode": done.returncode, "killed": done.killed,
                                    "actions": done.stdout.splitlines(),
                                    "stderr": done.stderr.splitlines()}) + "\n")
        return done

    def _admin_loop(self, arm: Arm) -> None:
        while not self.stop.is_set():
            t0 = time.monotonic()
            self.sync_once(arm)
            # The controller down (a fault): the next snapshot sees the queue.
            with contextlib.suppress(ArnoldError):
                site_checks.snapshot(arm.findings, f"{PREFIX}{arm.name}-")
            self.stop.wait(max(0.0, self.sync_every - (time.monotonic() - t0)))

    def _sampler(self, arm: Arm) -> None:
        while not self.stop.wait(5.0):
            proc = subprocess.run(["squeue", "-h", "-t", "PENDING", "-o", "%j"],
                                  capture_output=True, text=True)
            if proc.returncode == 0:
                mine = sum(1 for line in proc.stdout.splitlines()
                           if line.startswith(f"{PREFIX}{arm.name}-"))
                arm.depth.append((time.monotonic() - arm.started_at, mine))

    # -- one arm -------------------------------------------------------------------------
    def run_arm(self, name: str, users: int, faults: Sequence[Any] = ()) -> Arm:
        """Replay the stream as ``name`` (``arnold``: large jobs through arnold-sbatch and the
        admin loop; ``sbatch``: plain sbatch only); the faults run beside it."""
        arm = Arm(name)
        self.stop.clear()
        arm.started_at = time.monotonic()
        threads = [threading.Thread(target=self._sampler, args=(arm,), daemon=True)]
        if name == "arnold":
            threads.append(threading.Thread(target=self._admin_loop, args=(arm,), daemon=True))
        for fault in faults:
            threads.append(threading.Thread(target=fault.inject, args=(self, arm), daemon=True))
        for t in threads:
            t.start()
        feeder = threading.Thread(target=self._feed, args=(arm, users))
        feeder.start()
        feeder.join()
        ids = {s.job_id for s in arm.submitted if s.job_id is not None}
        self.progress(f"{name}: {len(ids)} jobs submitted; waiting for them to finish")
        until = arm.started_at + self.deadline_s
        while time.monotonic() < until:
            left = _unfinished(f"{PREFIX}{name}-")
            if not left:
                break
            time.sleep(5)
        else:
            self.progress(f"{name}: jobs left at the deadline; cancelling them")
            _cancel([i for i in _unfinished(f"{PREFIX}{name}-") if i != "?"])
        for fault in faults:
            fault.settle(self, arm)
        self.stop.set()
        for t in threads:
            t.join(timeout=120)
        if name == "arnold":
            self.sync_once(arm)  # the pass after every fault: it must reconcile
            site_checks.snapshot(arm.findings, f"{PREFIX}{name}-")
        arm.faults = [f.report() for f in faults]
        return arm


def _unfinished(prefix: str) -> list[str]:
    """Ids of the queued jobs named ``prefix...`` (``["?"]`` when squeue does not answer)."""
    proc = subprocess.run(["squeue", "-h", "-o", "%i %j"], capture_output=True, text=True)
    if proc.returncode != 0:
        return ["?"]  # the controller does not answer: not finished as far as we know
    return [line.split()[0] for line in proc.stdout.splitlines()
            if len(line.split()) == 2 and line.split()[1].startswith(prefix)]


def _cancel(job_ids: Sequence[str]) -> None:
    # By id: scancel --name takes one name only (a comma list matches nothing).
    for k in range(0, len(job_ids), 500):
        subprocess.run(["scancel", *job_ids[k:k + 500]], capture_output=True)


# -- results -----------------------------------------------------------------------------
def arm_metrics(arm: Arm, cluster_nodes: int,
                topology: Any, spreads: dict[int, float],
                planned: dict[int, tuple[frozenset[str], float]] | None = None
                ) -> dict[str, Any]:
    """Waits, spread, utilisation, overheads of one arm (from sacct: what really happened).
    A large job's spread is its rank file's: the prolog's mapping where it mapped one
    (``spreads``), its placement where it started on its planned nodes (``planned``), else
    Slurm's order on the nodes it got (what a plain sbatch job gets)."""
    from slurm_arnold.placement import JobShape
    from slurm_arnold.placement.plan import cells_from_rank_order, measure

    acct = {f.job_id: f for f in site_checks.accounting(
        int(time.time() - (time.monotonic() - arm.started_at)) - 120,
        f"{PREFIX}{arm.name}-")}
    ran = [(s, acct[s.job_id]) for s in arm.submitted
           if s.job_id in acct and acct[s.job_id].start is not None]
    waits = [f.start - f.submit for _, f in ran if f.start is not None]
    large = [(s, f) for s, f in ran if s.job.large]
    large_waits = [f.start - f.submit for _, f in large if f.start is not None]
    large_spreads = []
    for s, f in large:
        plan = (planned or {}).get(s.job_id or -1)
        if s.job_id in spreads:
            large_spreads.append(spreads[s.job_id])
        elif plan is not None and plan[0] == frozenset(f.nodes):
            large_spreads.append(plan[1])
        elif len(f.nodes) == s.job.nodes and all(n in topology.node_leaf for n in f.nodes):
            shape = JobShape(8, s.job.pp, s.job.nodes // s.job.pp, 8)
            cells = cells_from_rank_order(list(f.nodes), shape)
            large_spreads.append(measure(cells, shape, topology, 0.5).weighted_spread)
    ends = [f.end for _, f in ran if f.end is not None]
    busy = sum(len(f.nodes) * ((f.end or f.start or 0) - (f.start or 0)) for _, f in ran)
    span = (max(ends) - min(f.submit for _, f in ran)) if ran and ends else 0
    arnold_times = [s.seconds for s in arm.submitted if s.job.large and s.job_id is not None]
    plain_times = [s.seconds for s in arm.submitted if not s.job.large and s.job_id is not None]
    # A pass that failed (slurmctld down: it says so in one line) is counted apart: its time
    # is Slurm's commands giving up, not the loop's work.
    passes = [p.seconds for p in arm.passes if not p.killed and p.returncode == 0]
    failed = [p for p in arm.passes if not p.killed and p.returncode != 0]
    warnings = list(dict.fromkeys(line for p in arm.passes if not p.killed
                                  for line in p.stderr.splitlines() if line.strip()))
    return {
        "arm": arm.name, "submitted": sum(1 for s in arm.submitted if s.job_id is not None),
        "failed_submissions": sum(1 for s in arm.submitted if s.job_id is None),
        "ran": len(ran), "large_ran": len(large),
        "queue_max": max((d for _, d in arm.depth), default=0),
        "mean_wait_s": round(statistics.fmean(waits), 1) if waits else None,
        "large_mean_wait_s": round(statistics.fmean(large_waits), 1) if large_waits else None,
        "large_mean_spread": round(statistics.fmean(large_spreads), 3) if large_spreads
        else None,
        "utilisation": round(busy / (cluster_nodes * span), 3) if span else None,
        "submit_p50_s": quantile(arnold_times, 0.5),
        "submit_p95_s": quantile(arnold_times, 0.95),
        "plain_sbatch_p50_s": quantile(plain_times, 0.5),
        "plain_sbatch_p95_s": quantile(plain_times, 0.95),
        "sync_passes": len(passes), "sync_p50_s": quantile(passes, 0.5),
        "sync_p95_s": quantile(passes, 0.95),
        "sync_max_s": round(max(passes), 3) if passes else None,
        "sync_first_s": round(passes[0], 3) if passes else None,
        "sync_failed": len(failed),
        "sync_failed_max_s": round(max(p.seconds for p in failed), 3) if failed else None,
        "sync_warnings": warnings[:10],
    }


def quantile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile of ``values`` (nearest rank), rounded; None when there are none."""
    return round(percentile(values, q), 3) if values else None


def start_rows(site_db: Path, job_ids: set[int]) -> tuple[dict[int, float], list[float]]:
    """From the site database (read directly): each job's weighted spread where the prolog
    mapped its ranks on the nodes it got, and the prolog's seconds for every job of
    ``job_ids`` it ran for (``prolog_runs``)."""
    import sqlite3

    spreads: dict[int, float] = {}
    seconds: list[float] = []
    if not site_db.exists():
        return spreads, seconds
    con = sqlite3.connect(f"file:{site_db}?mode=ro", uri=True, timeout=30)
    try:
        tables = {r[0] for r in con.execute("select name from sqlite_master")}
        if "bindings" in tables:
            for job_id, spread in con.execute(
                    "select job_id, weighted_spread from bindings where kind = 'start'"):
                if job_id in job_ids and spread is not None:
                    spreads[int(job_id)] = float(spread)
        if "prolog_runs" in tables:
            seconds = [float(took) for job_id, took in con.execute(
                "select job_id, seconds from prolog_runs") if job_id in job_ids]
    finally:
        con.close()
    return spreads, seconds


def planned_spreads(user_dbs: Sequence[Path], job_ids: set[int]) -> dict[int, tuple[
        frozenset[str], float]]:
    """From the users' databases (read directly): each arnold-sbatch job's planned nodes and
    the weighted spread of its placement there (what it got when it started on them)."""
    import json
    import sqlite3

    out: dict[int, tuple[frozenset[str], float]] = {}
    for path in user_dbs:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
        try:
            if not con.execute("select 1 from sqlite_master where name = 'jobs'").fetchone():
                continue
            for job_id, placement in con.execute(
                    "select slurm_job_id, placement from jobs where placement is not null"):
                if job_id not in job_ids:
                    continue
                try:
                    found = json.loads(placement)
                    out[int(job_id)] = (frozenset(found["nodes"]),
                                        float(found["metrics"]["weighted_spread"]))
                except (ValueError, KeyError, TypeError):
                    continue
        finally:
            con.close()
    return out


def db_bytes(paths: Sequence[Path]) -> int:
    """Bytes of these databases (with any journal beside them)."""
    total = 0
    for path in paths:
        for p in (path, path.with_name(path.name + "-journal"), path.with_name(path.name + "-wal")):
            if p.exists():
                total += p.stat().st_size
    return total


def seeded_times(seed: int, count: int, lo: float, hi: float) -> list[float]:
    """``count`` moments in [lo, hi) from ``seed`` (sorted)."""
    rng = random.Random(seed)
    return sorted(rng.uniform(lo, hi) for _ in range(count))


def cleanup(prefix: str = PREFIX) -> None:
    """Cancel every job of this bench still queued, and wait until none is left."""
    _cancel([i for i in _unfinished(prefix) if i != "?"])
    until = time.monotonic() + 180
    while _unfinished(prefix) and time.monotonic() < until:
        time.sleep(2)


def make_users(count: int) -> list[str]:
    """``count`` Unix users for the stream (made when missing; root only)."""
    return ensure_users([f"arnoldsite{i:02d}" for i in range(1, count + 1)])
