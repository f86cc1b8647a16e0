"""``arnold bench fidelity``: the same small log on the live cluster and in ``arnold sim``.

A slice of the KTH log (``--jobs``, default 100, from job ``--first``) has its times divided by
``--scale`` (submit offsets and run times in seconds; time limits rounded up to whole minutes,
Slurm's unit, at least one). It is replayed twice with the same settings:

- **live**: every job through ``arnold-sbatch`` at its scaled submit time (a large job with
  ``--tp``/``--pp``, so arnold places or plans it; the rest passed through to sbatch), each
  running ``sleep <run time>``, while ``arnold reserve sync`` runs every ``--sync-every``
  seconds; starts and ends come from sacct;
- **sim**: ``arnold sim``'s engine, policy arnold, on the cluster's own topology.

Both gate on time limits (``requested``), so the predictor's training does not differ. Compared:

- **same start order**: the largest set of jobs that start in the same order in both (the
  longest run of jobs, taken in live start order, whose simulated starts never go back by
  more than ``--tolerance`` seconds: sim starts closer than that are ties), as a fraction of
  the jobs; the issue's target is 90%;
- **pairs**: of the job pairs the simulation starts more than the tolerance apart, the share
  started in the same order live (a Kendall-style agreement);
- **strictly in order**: jobs whose every such pair agrees (one late job breaks many);
- waits: means and mean absolute difference per job.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from predictor.swf import JobRecord, read_swf
from slurm_arnold.errors import ArnoldError
from slurm_arnold.sim.cluster import SimCluster
from slurm_arnold.sim.engine import Simulation
from slurm_arnold.sim.jobs import SimJob, build_workload
from slurm_arnold.sim.settings import SimSettings
from slurm_arnold.slurm import Slurm
from slurm_arnold.topology import parse_topology

GPUS_PER_PROC = 4.0  # KTH's largest jobs (~100 processors) fit the 64-node dev cluster
LPJ_GPUS = 128
HORIZON_H = 0.2  # in scaled time: reserve when the nodes drain within 12 minutes


@dataclass(frozen=True)
class FidelitySetup:
    """What one fidelity run replays, and how."""

    log: Path
    first: int = 10_000
    jobs: int = 100
    scale: float = 300.0
    sync_every: float = 2.0
    tolerance: float = 3.0


def scaled_records(setup: FidelitySetup) -> list[JobRecord]:
    """The log slice with times divided by ``scale``; limits whole minutes, runs within them."""
    records = [r for r in read_swf(setup.log) if isinstance(r, JobRecord)
               and r.start is not None and r.end is not None and r.time_limit]
    chosen = records[setup.first: setup.first + setup.jobs]
    if not chosen:
        raise ArnoldError(f"{setup.log}: no jobs from {setup.first}; lower --first")
    t0 = chosen[0].submit
    out = []
    for r in chosen:
        assert r.start is not None and r.end is not None and r.time_limit
        limit = max(60, math.ceil(r.time_limit / setup.scale / 60) * 60)
        run = min(max(1, round((r.end - r.start) / setup.scale)), limit)
        submit = round((r.submit - t0) / setup.scale)
        out.append(replace(r, submit=submit, start=submit, end=submit + run, time_limit=limit))
    return out


def simulate_scaled(records: Sequence[JobRecord], topology_text: str,
                    gpus_per_node: int) -> list[SimJob]:
    """The jobs after ``arnold sim``'s arnold policy (gate on time limits)."""
    cluster = SimCluster(parse_topology(topology_text, "scontrol show topology", live=True),
                         gpus_per_node)
    workload = build_workload(records, gpus_per_node=gpus_per_node,
                              gpus_per_proc=GPUS_PER_PROC, cluster_gpus=cluster.total_gpus,
                              lpj_gpus=LPJ_GPUS)
    settings = SimSettings(policy="arnold", predictor="requested", reserve_horizon_h=HORIZON_H)
    sim = Simulation(cluster, workload, settings)
    sim.run()
    return workload.jobs


def _sbatch_args(job: SimJob) -> list[str]:
    limit_min = str(int(job.limit // 60))
    sleep = ["--wrap", f"sleep {int(job.runtime)}"]
    common = ["--parsable", f"--time={limit_min}", "-o", "/dev/null", "-J",
              f"fid-{job.record.job_id}"]
    if job.lpj:
        pp, _ = job.layout()
        return [*common, f"-N{job.nodes}", "--exclusive", "--gpus-per-node=8", "--tp", "8",
                "--pp", str(pp), *sleep]
    if job.nodes:
        return [*common, f"-N{job.nodes}", "--exclusive", "--gres=gpu:8", *sleep]
    return [*common, "-N1", f"--gres=gpu:{job.gpus}", *sleep]


def replay_live(jobs: Sequence[SimJob], setup: FidelitySetup, env: dict[str, str],
                progress: Callable[[str], None] | None = None) -> dict[str, int]:
    """Submit each job at its scaled time through arnold-sbatch while ``sync`` runs; wait for
    all to end. The Slurm job id of each log job id."""
    bindir = Path(sys.executable).parent
    ids: dict[str, int] = {}
    errors: list[str] = []
    stop = threading.Event()

    def syncer() -> None:
        while not stop.is_set():
            proc = subprocess.run([str(bindir / "arnold"), "reserve", "sync"],
                                  capture_output=True, text=True, env=env)
            if proc.returncode:
                errors.append(f"sync: {proc.stderr.strip()}")
            stop.wait(setup.sync_every)

    def submit(job: SimJob) -> None:
        proc = subprocess.run([str(bindir / "arnold-sbatch"), *_sbatch_args(job)],
                              capture_output=True, text=True, env=env)
        if proc.returncode:
            errors.append(f"job {job.record.job_id}: {proc.stderr.strip()}")
            return
        ids[job.record.job_id] = int(proc.stdout.strip().split(";")[0])

    sync_thread = threading.Thread(target=syncer, daemon=True)
    sync_thread.start()
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=8) as pool:
        for job in sorted(jobs, key=lambda j: j.submit):
            delay = job.submit - (time.monotonic() - t0)
            if delay > 0:
                time.sleep(delay)
            pool.submit(submit, job)
    slurm = Slurm(env)
    while True:
        alive = [j for j in slurm.jobs() if j.job_id in set(ids.values())
                 and j.state in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING")]
        if not alive:
            break
        if progress:
            progress(f"{len(alive)} jobs still pending or running")
        time.sleep(2)
    stop.set()
    sync_thread.join()
    # One last pass, after every job ended: it deletes the last reservations.
    proc = subprocess.run([str(bindir / "arnold"), "reserve", "sync"], capture_output=True,
                          text=True, env=env)
    if proc.returncode:
        errors.append(f"sync: {proc.stderr.strip()}")
    if errors:
        raise ArnoldError(f"{len(errors)} live errors; first: {errors[0]}")
    return ids


def live_times(ids: dict[str, int], env: dict[str, str]) -> dict[str, tuple[float, float]]:
    """(submit, start) of each job that ran, from slurmdbd's whole records, in epoch seconds."""
    records = Slurm(env).finished_accounting(list(ids.values()), 120)
    return {name: (float(r.submit), float(r.start)) for name, job_id in ids.items()
            if (r := records[job_id]).start is not None and r.submit is not None}


def agreement(sim_start: dict[str, float], live_start: dict[str, float],
              tolerance: float) -> dict[str, float]:
    """Start-order agreement (see the module docstring) over the jobs both replays ran."""
    keys = sorted(set(sim_start) & set(live_start))
    s = np.array([sim_start[k] for k in keys])
    live = np.array([live_start[k] for k in keys])
    ds = s[:, None] - s[None, :]
    dl = live[:, None] - live[None, :]
    ordered = np.abs(ds) > tolerance
    agree = (np.sign(ds) == np.sign(dl)) | ~ordered
    in_order = agree.all(axis=1)
    pairs = int(np.triu(ordered, 1).sum())
    # Longest chain in live order whose sim starts never go back by more than the tolerance.
    by_live = [sim_start[k] for k in sorted(keys, key=lambda k: live_start[k])]
    best = [1] * len(by_live)
    for j in range(len(by_live)):
        for i in range(j):
            if by_live[j] >= by_live[i] - tolerance and best[i] + 1 > best[j]:
                best[j] = best[i] + 1
    return {
        "jobs": len(keys),
        "same_order_fraction": round(max(best, default=0) / len(keys), 4) if keys else 0.0,
        "in_order_fraction": round(float(in_order.mean()), 4) if keys else 0.0,
        "pair_agreement": round(float(np.triu(agree & ordered, 1).sum() / pairs), 4)
        if pairs else 1.0,
        "ordered_pairs": pairs,
    }


def run(setup: FidelitySetup, env: dict[str, str] | None = None,
        progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The whole comparison; needs the live cluster and admin rights (``reserve sync``)."""
    env = dict(os.environ if env is None else env)
    env.update(ARNOLD_RESERVATION__LARGE_JOB_GPUS=str(LPJ_GPUS),
               ARNOLD_RESERVATION__PREDICTOR="requested",
               ARNOLD_RESERVATION__HORIZON_H=str(HORIZON_H))
    slurm = Slurm(env)
    busy = [j for j in slurm.jobs() if j.state in ("PENDING", "RUNNING")]
    if busy:
        raise ArnoldError(f"{len(busy)} jobs are in the queue; the fidelity replay needs an "
                          "empty cluster (scancel them, or wait)")
    records = scaled_records(setup)
    topo = slurm.topology_text()
    sim_jobs = simulate_scaled(records, topo, 8)
    if progress:
        progress(f"simulated {len(sim_jobs)} jobs; replaying them live")
    t0 = time.time()
    ids = replay_live(sim_jobs, setup, env, progress)
    times = live_times(ids, env)
    first_submit = min(t[0] for t in times.values())
    live_start = {k: t[1] - first_submit for k, t in times.items()}
    live_wait = {k: t[1] - t[0] for k, t in times.items()}
    sim_start = {j.record.job_id: float(j.start or 0) for j in sim_jobs}
    sim_wait = {j.record.job_id: float((j.start or 0) - j.submit) for j in sim_jobs}
    keys = sorted(set(sim_wait) & set(live_wait))
    sw = np.array([sim_wait[k] for k in keys])
    lw = np.array([live_wait[k] for k in keys])
    result = agreement(sim_start, live_start, setup.tolerance) | {
        "sim_mean_wait_s": round(float(sw.mean()), 2) if keys else 0.0,
        "live_mean_wait_s": round(float(lw.mean()), 2) if keys else 0.0,
        "mean_abs_wait_diff_s": round(float(np.abs(sw - lw).mean()), 2) if keys else 0.0,
        "lpjs": sum(1 for j in sim_jobs if j.lpj),
        "replay_seconds": round(time.time() - t0, 1),
        "scale": setup.scale, "first": setup.first, "tolerance_s": setup.tolerance,
        "per_job": [{"job": k, "sim_start_s": sim_start[k], "live_start_s": live_start[k],
                     "sim_wait_s": sim_wait[k], "live_wait_s": live_wait[k]} for k in keys],
    }
    return result


def markdown(result: dict[str, Any], command: str) -> str:
    """The docs section."""
    return "\n".join([
        "## Fidelity: the live cluster vs the simulator", "",
        f"Command: `{command}` (on the 64-node local cluster; setup in "
        "`benchmarks/fidelity.py`).", "",
        f"- {result['jobs']} KTH jobs from job {result['first']:,}, times / {result['scale']:g}"
        f" ({result['lpjs']} large jobs of {LPJ_GPUS}+ GPUs), replayed live in "
        f"{result['replay_seconds']} s.",
        f"- Same start order (sim ties within {result['tolerance_s']:g} s): **"
        f"{result['same_order_fraction']:.0%} of jobs** (target 90%: "
        f"{'met' if result['same_order_fraction'] >= 0.9 else 'NOT met'}); pairs ordered "
        f"alike: {result['pair_agreement']:.1%} of {result['ordered_pairs']:,}; jobs with "
        f"every pair alike: {result['in_order_fraction']:.0%}.",
        f"- Mean wait: live {result['live_mean_wait_s']} s, sim {result['sim_mean_wait_s']} s;"
        f" mean |difference| per job {result['mean_abs_wait_diff_s']} s.",
    ])
