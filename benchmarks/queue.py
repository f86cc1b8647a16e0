"""``arnold bench queue``: a busy cluster's job sequence through arnold-sbatch and through plain
sbatch, side by side on the live local cluster.

A seeded sequence of medium (4-16 nodes) and large (32 nodes, 256 GPUs) TP 8 jobs, each
``sleep``-ing a few seconds, arrives every couple of seconds on a cluster that starts busy (the
same background jobs in both runs, submitted with plain sbatch). Run 1: every job through plain
``sbatch -N n --exclusive`` (Slurm chooses nodes and the task order). Run 2: the same jobs at the
same offsets through ``arnold-sbatch --tp 8 --pp P``, with ``arnold reserve sync`` every
``period`` seconds in the background, as the site's loop would; halfway, a planned node of a
waiting job is drained (and resumed at the end), to time the repair.

Reported: jobs refused (must be 0), the mean weighted spread of the started jobs with alpha 0.5
(Slurm's: its nodes in its default task order, by node name; ours: the placement the job ran
with, after any move), the mean wait (sacct's Start - Submit) and its ratio ours / Slurm's
(target <= 1.05), and the repair latency (drain to rewritten ``ReqNodeList``).
"""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_arnold.errors import ArnoldError
from slurm_arnold.placement import JobShape
from slurm_arnold.placement.engine import place_from_node_list
from slurm_arnold.slurm import AccountingRecord, Slurm
from slurm_arnold.snapshot.live import live_cluster

ALPHA = 0.5
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")


@dataclass(frozen=True)
class QueuedJob:
    """One job of the sequence: when it arrives, its size and shape, how long it runs."""

    at: float
    nodes: int
    pp: int
    seconds: int


def sequence(count: int, seed: int = 7) -> list[QueuedJob]:
    """``count`` jobs: mostly medium, one in five large; arrivals ~2 s apart."""
    rng = random.Random(seed)
    jobs, t = [], 0.0
    for _ in range(count):
        nodes = 32 if rng.random() < 0.2 else rng.choice((4, 8, 16))
        pp = 4 if nodes >= 16 else 2
        jobs.append(QueuedJob(round(t, 1), nodes, pp, rng.randint(6, 20)))
        t += rng.expovariate(1 / 2.0)
    return jobs


BACKGROUND = ((24, 25), (16, 12), (12, 18))  # (nodes, seconds): 52 of 64 busy at the start
QUICK_BACKGROUND = ((24, 10), (16, 5), (12, 8))


def _submit(cmd: list[str]) -> tuple[int | None, str]:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    out = proc.stdout.strip().split(";")[0]
    return (int(out) if proc.returncode == 0 and out.isdigit() else None), proc.stderr.strip()


def _plain(nodes: int, seconds: int) -> list[str]:
    return ["sbatch", "--parsable", "-N", str(nodes), "--exclusive", "--gpus-per-node=8",
            "-t", "2", "-o", "/dev/null", "--wrap", f"sleep {seconds}"]


def _wait_empty(slurm: Slurm, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while any(j.state not in TERMINAL for j in slurm.jobs()):
        if time.monotonic() > deadline:
            raise ArnoldError("the queue did not empty; cancel the cluster's jobs first")
        time.sleep(0.5)


def _wait_s(record: AccountingRecord) -> float:
    """sacct's Start - Submit of a job that ran."""
    if record.start is None or record.submit is None:
        raise ArnoldError(f"sacct has no start or submit time for job {record.job_id}")
    return float(record.start - record.submit)


def _replay(slurm: Slurm, jobs: list[QueuedJob], submit: Callable[[QueuedJob], list[str]],
            background: tuple[tuple[int, int], ...],
            during: Callable[[float], None] | None = None) -> tuple[list[int | None], list[str]]:
    _wait_empty(slurm, 180)
    for nodes, seconds in background:
        if _submit(_plain(nodes, seconds))[0] is None:
            raise ArnoldError("could not submit the background load")
    t0 = time.monotonic()
    ids: list[int | None] = []
    errors: list[str] = []
    for job in jobs:
        while time.monotonic() - t0 < job.at:
            if during:
                during(time.monotonic() - t0)
            time.sleep(0.1)
        job_id, err = _submit(submit(job))
        ids.append(job_id)
        if job_id is None:
            errors.append(err)
    deadline = time.monotonic() + 600
    while any(j.state not in TERMINAL for j in slurm.jobs()):
        if during:
            during(time.monotonic() - t0)
        if time.monotonic() > deadline:
            raise ArnoldError("the sequence did not finish within 10 minutes")
        time.sleep(0.5)
    return ids, errors


def run(count: int = 24, period: float = 5.0, seed: int = 7,
        progress: Callable[[str], None] | None = None,
        background: tuple[tuple[int, int], ...] = BACKGROUND) -> dict[str, Any]:
    """Both runs of ``count`` jobs on the same ``background`` load; the comparison."""
    slurm = Slurm()
    say = progress or (lambda _: None)
    bindir = Path(sys.executable).parent
    jobs = sequence(count, seed)
    topology = live_cluster(slurm).topology

    def sync() -> None:
        subprocess.run([str(bindir / "arnold"), "reserve", "sync"], capture_output=True)

    _wait_empty(slurm, 180)
    sync()  # no reservation of an earlier run may hold nodes during the plain one
    say(f"run 1/2: {count} jobs through plain sbatch")
    plain_ids, plain_errors = _replay(slurm, jobs, lambda j: _plain(j.nodes, j.seconds),
                                      background)

    say(f"run 2/2: the same jobs through arnold-sbatch, sync every {period:g} s")
    stop = threading.Event()
    probe = RepairProbe(slurm, after=jobs[len(jobs) // 2].at)

    def loop() -> None:
        while not stop.wait(period):
            sync()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        ours_ids, ours_errors = _replay(
            slurm, jobs, lambda j: [str(bindir / "arnold-sbatch"), "--parsable", "-N",
                                    str(j.nodes), "--exclusive", "--gpus-per-node=8",
                                    "--ntasks-per-node=8", "-t", "2", "-o", "/dev/null",
                                    "--tp", "8", "--pp", str(j.pp), "--alpha", str(ALPHA),
                                    "--wrap", f"sleep {j.seconds}"],
            background, during=probe.step)
    finally:
        stop.set()
        thread.join()
        probe.undo()
        sync()  # the reservations of the run's large jobs go with them
    return _compare(jobs, plain_ids, ours_ids, plain_errors + ours_errors, topology,
                    probe.latency(), period)


class RepairProbe:
    """Drains one busy planned node of a waiting job once the sequence is halfway, and times
    how long until that job's required nodes no longer name it."""

    def __init__(self, slurm: Slurm, after: float) -> None:
        self.slurm, self.after = slurm, after
        self.node: str | None = None
        self.job: int | None = None
        self.drained_at: float | None = None
        self.repaired_at: float | None = None

    def step(self, elapsed: float) -> None:
        """Called while the replay runs."""
        if self.repaired_at is not None or elapsed < self.after:
            return
        jobs = {j.job_id: j for j in self.slurm.jobs()}
        if self.node is None:
            busy = {n for j in jobs.values() if j.state == "RUNNING" for n in j.nodes}
            for j in jobs.values():
                victims = sorted(set(j.required_nodes) & busy) if j.state == "PENDING" else []
                if victims:
                    self.slurm.run(["scontrol", "update", f"NodeName={victims[0]}",
                                    "State=DRAIN", "Reason=arnold-bench-queue"])
                    self.node, self.job, self.drained_at = victims[0], j.job_id, time.monotonic()
                    return
            return
        job = jobs.get(self.job or -1)
        if job is None or self.node not in job.required_nodes:
            self.repaired_at = time.monotonic()

    def undo(self) -> None:
        """Resume the drained node."""
        if self.node is not None:
            self.slurm.run(["scontrol", "update", f"NodeName={self.node}", "State=RESUME"])

    def latency(self) -> float | None:
        """Seconds from the drain to the repair, if both happened."""
        if self.drained_at is None or self.repaired_at is None:
            return None
        return self.repaired_at - self.drained_at


def _compare(jobs: list[QueuedJob], plain_ids: list[int | None], ours_ids: list[int | None],
             errors: list[str], topology: Any, latency: float | None,
             period: float) -> dict[str, Any]:
    from site_config import load_config
    from slurm_arnold.site_state import open_site_db, open_user_db

    # Whole records only: slurmdbd briefly lists a just-ended job on its first node alone.
    slurm = Slurm()
    plain_acct = slurm.finished_accounting([i for i in plain_ids if i is not None], 120)
    ours_acct = slurm.finished_accounting([i for i in ours_ids if i is not None], 120)
    config = load_config()
    records = {r["slurm_job_id"]: r for r in open_user_db(config).jobs(limit=1000)}
    moves: dict[int, float] = {}
    for move in open_site_db(config).db.table("bindings").rows_where(order_by="id"):
        moves[int(move["job_id"])] = float(move["weighted_spread"])
    rows: list[dict[str, Any]] = []
    plain_spreads: list[float] = []
    ours_spreads: list[float] = []
    plain_waits: list[float] = []
    ours_waits: list[float] = []
    for job, p_id, o_id in zip(jobs, plain_ids, ours_ids, strict=True):
        shape = JobShape.from_nodes(job.nodes, 8, job.pp, 8)
        row: dict[str, Any] = {"nodes": job.nodes, "pp": job.pp}
        if p_id is not None and plain_acct[p_id].state == "COMPLETED":
            nodes = sorted(plain_acct[p_id].nodes)
            spread = place_from_node_list("slurm", nodes, topology, shape,
                                          ALPHA).metrics.weighted_spread
            wait = _wait_s(plain_acct[p_id])
            plain_spreads.append(spread)
            plain_waits.append(wait)
            row |= {"slurm_spread": spread, "slurm_wait_s": wait}
        if o_id is not None and ours_acct[o_id].state == "COMPLETED":
            record = records.get(o_id)
            spread = moves.get(o_id, json.loads(record["placement"])["metrics"][
                "weighted_spread"] if record else float("nan"))
            wait = _wait_s(ours_acct[o_id])
            ours_spreads.append(spread)
            ours_waits.append(wait)
            row |= {"arnold_spread": spread, "arnold_wait_s": wait,
                    "moved": o_id in moves}
        rows.append(row)
    mean_plain_wait = statistics.fmean(plain_waits) if plain_waits else 0.0
    mean_ours_wait = statistics.fmean(ours_waits) if ours_waits else 0.0
    return {
        "jobs": len(jobs), "sync_period_s": period,
        "refused": sum(1 for i in ours_ids if i is None), "errors": errors[:3],
        "slurm_mean_weighted_spread": round(statistics.fmean(plain_spreads), 3),
        "arnold_mean_weighted_spread": round(statistics.fmean(ours_spreads), 3),
        "spread_ratio": round(statistics.fmean(ours_spreads) / statistics.fmean(plain_spreads),
                              3) if plain_spreads and statistics.fmean(plain_spreads) else None,
        "slurm_mean_wait_s": round(mean_plain_wait, 1),
        "arnold_mean_wait_s": round(mean_ours_wait, 1),
        "wait_ratio": round(mean_ours_wait / mean_plain_wait, 3) if mean_plain_wait else None,
        "moved_jobs": sum(1 for r in rows if r.get("moved")),
        "repair_latency_s": round(latency, 1) if latency is not None else None,
        "per_job": rows,
    }


def markdown(result: dict[str, Any], command: str) -> str:
    """The docs section."""
    return "\n".join([
        "## Queue: a busy cluster through arnold-sbatch and plain sbatch", "",
        f"Command: `{command}` (live, the 64-node local cluster, `benchmarks/queue.py`): "
        f"{result['jobs']} jobs (4-16 nodes, one in five 32), arriving ~2 s apart on a "
        "cluster that starts with 52 of 64 nodes busy; the same sequence through plain "
        f"sbatch, then through arnold-sbatch with `arnold reserve sync` every "
        f"{result['sync_period_s']:g} s; halfway a planned node of a waiting job is drained.",
        "",
        "| | plain sbatch | arnold-sbatch | ratio |",
        "|---|---|---|---|",
        f"| mean weighted spread (alpha 0.5) of started jobs | "
        f"{result['slurm_mean_weighted_spread']} | {result['arnold_mean_weighted_spread']} | "
        f"x{result['spread_ratio']} |",
        f"| mean wait (s) | {result['slurm_mean_wait_s']} | {result['arnold_mean_wait_s']} | "
        f"x{result['wait_ratio']} (target <= 1.05) |",
        "",
        f"Jobs refused: **{result['refused']}** (must be 0). Jobs moved or repaired by `sync`: "
        f"{result['moved_jobs']}. Repair latency (drain to rewritten ReqNodeList): "
        f"{result['repair_latency_s']} s with a {result['sync_period_s']:g} s loop.",
    ])
