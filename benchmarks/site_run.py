"""``arnold bench site``, the whole run: the stream (``benchmarks.site``) on the live cluster,
the faults beside it (``benchmarks.site_faults``), every rule checked afterwards
(``benchmarks.site_checks``), the baseline, the targets and the docs section."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import site_checks, site_faults
from benchmarks.site import (
    PREFIX,
    Runner,
    arm_metrics,
    cleanup,
    db_bytes,
    make_users,
    planned_spreads,
    quantile,
    seeded_times,
    start_rows,
    stream,
)
from slurm_arnold.errors import ArnoldError


@dataclass(frozen=True)
class SiteSpec:
    """What one ``arnold bench site`` run does (the CLI's options)."""

    log: str = "SDSC-SP2"
    data_dir: Path = Path("../shared/data/swf")
    jobs: int = 5000
    users: int = 20
    submit_s: float = 900.0
    work_s: float = 1500.0
    sync_every: float = 30.0
    faults: tuple[str, ...] = ()
    fault_window: tuple[float, float] = (0.1, 0.8)  # share of submit_s + work_s
    down_s: float = 60.0
    baseline: bool = True
    seed: int = 0
    skip: int = 0
    large_nodes: int = 32
    #: Seconds after the start when jobs still queued are cancelled (None: generous).
    deadline_s: float | None = None
    #: Where each pass of the admin loop is written (JSON lines), if anywhere.
    passes_log: Path | None = None


def run(spec: SiteSpec, progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """The bench (see the module): both arms, the fault table, every check."""
    from site_config import load_config
    from slurm_arnold.slurm import Slurm
    from slurm_arnold.snapshot.live import live_cluster

    if os.geteuid() != 0:
        raise ArnoldError("arnold bench site makes Unix users, runs the admin loop and kills "
                          "daemons: run it as root")
    slurm = Slurm(backend="commands")
    config = load_config()
    view = live_cluster(slurm, minipod_level=config.minipod_level)
    topology = view.topology
    partition = slurm.default_partition()
    up = [n for n in slurm.nodes() if n.state in ("IDLE", "MIXED", "ALLOCATED")
          and (partition is None or partition in n.partitions)]
    cluster_nodes = len(up)
    if cluster_nodes < 16:
        raise ArnoldError(f"{cluster_nodes} nodes up in the default partition; the site bench "
                          "needs at least 16")
    cleanup()
    users = make_users(spec.users)
    jobs = stream(spec.log, spec.data_dir, spec.jobs, cluster_nodes, users,
                  submit_s=spec.submit_s, work_s=spec.work_s, large_nodes=spec.large_nodes,
                  skip=spec.skip)
    progress(f"{len(jobs)} jobs of {spec.log} for {cluster_nodes} nodes "
             f"({sum(j.large for j in jobs)} large, through arnold-sbatch), {len(users)} users")
    runner = Runner(jobs, sync_every=spec.sync_every,
                    deadline_s=spec.deadline_s or spec.submit_s + 4 * spec.work_s + 600,
                    large_gpus=spec.large_nodes * 8, progress=progress,
                    passes_log=spec.passes_log)
    span = spec.submit_s + spec.work_s
    times = seeded_times(spec.seed, len(spec.faults), spec.fault_window[0] * span,
                         spec.fault_window[1] * span)
    faults = site_faults.make(list(spec.faults), times, down_s=spec.down_s)
    for fault in faults:
        if fault.during_submissions:  # the same share of the window, of the arrivals' span
            fault.at *= spec.submit_s / span
    result: dict[str, Any] = {"log": spec.log, "jobs": len(jobs), "users": len(users),
                              "nodes": cluster_nodes, "seed": spec.seed,
                              "slurm": site_faults.lane(), "large_nodes": spec.large_nodes,
                              "sync_every_s": spec.sync_every,
                              "state_dir": str(config.state_dir)}
    t0 = time.monotonic()
    arm = runner.run_arm("arnold", spec.users, faults)
    result["arnold_wall_s"] = round(time.monotonic() - t0)
    site_db = config.db_path
    dbs = site_checks.databases(config.state_dir, config.users_dir)
    user_dbs = [p for p in dbs if p.is_relative_to(config.users_dir)]
    ids = {s.job_id for s in arm.submitted if s.job_id is not None}
    spreads, prolog = start_rows(site_db, ids)
    findings = arm.findings
    arm_epoch = time.time() - (time.monotonic() - arm.started_at)
    acct = site_checks.accounting(int(arm_epoch) - 120, f"{PREFIX}arnold-")
    kills = [arm_epoch + f.when for f in faults
             if isinstance(f, site_faults.SlurmctldKill) and f.when is not None]
    findings.shared_nodes = site_checks.shared_nodes(acct, kills)
    findings.corrupt_databases = site_checks.integrity(dbs)
    findings.unsettled_records = site_checks.unsettled(
        site_db if site_db.exists() else None, user_dbs,
        set(site_checks.reservations()))
    planned = planned_spreads(user_dbs, ids)
    result["arnold"] = arm_metrics(arm, cluster_nodes, topology, spreads, planned) | {
        "prolog_jobs": len(prolog), "prolog_p50_s": quantile(prolog, 0.5),
        "prolog_p95_s": quantile(prolog, 0.95), "state_db_bytes": db_bytes(dbs),
        "databases": len(dbs)}
    result["faults"] = arm.faults
    result["rules"] = {rule: offenders[:5] for rule, offenders in findings.rules().items()}
    result["snapshots"] = findings.snapshots
    if spec.baseline:
        cleanup()
        t0 = time.monotonic()
        base = runner.run_arm("sbatch", spec.users)
        result["sbatch_wall_s"] = round(time.monotonic() - t0)
        result["sbatch"] = arm_metrics(base, cluster_nodes, topology, {})
    result["held"] = findings.held() and all(f["held"] for f in result["faults"])
    result["targets"] = targets(result)
    return result


def targets(result: dict[str, Any]) -> dict[str, bool | None]:
    """The issue's acceptance, judged on this run (None: not measured in it)."""
    a = result["arnold"]
    b = result.get("sbatch")
    out: dict[str, bool | None] = {
        "queue >= 2,000 at once": a["queue_max"] >= 2000,
        ">= 5,000 jobs through": a["ran"] >= 5000,
        "every sync pass <= 10 s (those that did not fail)":
            None if a["sync_max_s"] is None else a["sync_max_s"] <= 10,
        "arnold-sbatch p95 <= 2 s": None if a["submit_p95_s"] is None
        else a["submit_p95_s"] <= 2,
        "prolog p95 <= 1 s": None if a["prolog_p95_s"] is None else a["prolog_p95_s"] <= 1,
    }
    if b is not None:
        def le(x: float | None, y: float | None, factor: float = 1.0) -> bool | None:
            return None if x is None or y is None else x <= y * factor
        out["large jobs' mean wait <= sbatch's"] = le(a["large_mean_wait_s"],
                                                      b["large_mean_wait_s"])
        out["large jobs' spread lower"] = (
            None if a["large_mean_spread"] is None or b["large_mean_spread"] is None
            else a["large_mean_spread"] < b["large_mean_spread"])
        out["everyone's mean wait <= sbatch's x 1.05"] = le(a["mean_wait_s"], b["mean_wait_s"],
                                                            1.05)
    return out


def markdown(result: dict[str, Any], command: str) -> str:
    """The docs section."""
    a, b = result["arnold"], result.get("sbatch")
    lines = [
        "## A site's size and its faults", "",
        f"Command: `{command}` (Slurm {result['slurm']}, {result['nodes']} nodes; setup in "
        f"`benchmarks/site.py`: {result['jobs']:,} jobs of {result['log']} from "
        f"{result['users']} Unix users, jobs of {result['large_nodes']} nodes or more through "
        f"arnold-sbatch (TP 8 x PP), the rest plain sbatch; `arnold reserve sync` every "
        f"{result['sync_every_s']:g} s; seed {result['seed']}; the baseline replays the same "
        "stream with plain sbatch only).", "",
        "| | arnold | plain sbatch |", "|---|---|---|"]

    def row(label: str, key: str, unit: str = "") -> None:
        def fmt(x: Any) -> str:
            return "-" if x is None else f"{x}{unit}"
        lines.append(f"| {label} | {fmt(a.get(key))} | {fmt(b.get(key) if b else None)} |")

    row("jobs run", "ran")
    row("most jobs waiting at once", "queue_max")
    row("large jobs' mean wait", "large_mean_wait_s", " s")
    row("large jobs' mean weighted spread", "large_mean_spread")
    row("everyone's mean wait", "mean_wait_s", " s")
    row("utilisation", "utilisation")
    lines.append(f"| sync pass p50 / p95 / max (first) | {a['sync_p50_s']} / {a['sync_p95_s']}"
                 f" / {a['sync_max_s']} s ({a['sync_first_s']} s) | - |")
    if a.get("sync_failed"):
        lines.append(f"| sync passes that failed, slowest (slurmctld down: one line each) | "
                     f"{a['sync_failed']}, {a['sync_failed_max_s']} s | - |")
    lines.append(f"| submission p50 / p95 (large jobs) | {a['submit_p50_s']} / "
                 f"{a['submit_p95_s']} s (arnold-sbatch) | "
                 + (f"{b['submit_p50_s']} / {b['submit_p95_s']} s (sbatch) |" if b else "- |"))
    lines.append(f"| plain sbatch p50 / p95 (the rest) | {a['plain_sbatch_p50_s']} / "
                 f"{a['plain_sbatch_p95_s']} s | "
                 + (f"{b['plain_sbatch_p50_s']} / {b['plain_sbatch_p95_s']} s |" if b
                    else "- |"))
    lines.append(f"| prolog p50 / p95 ({a['prolog_jobs']} jobs) | {a['prolog_p50_s']} / "
                 f"{a['prolog_p95_s']} s | - |")
    lines.append(f"| state databases ({a['databases']}) | {a['state_db_bytes']:,} bytes | - |")
    lines += ["", "| fault | when | expectation | seen | held |", "|---|---|---|---|---|"]
    for f in result["faults"]:
        seen = f["seen"] + ("; BROKEN: " + "; ".join(f["broken"]) if f["broken"] else "")
        if result.get("state_dir"):  # what the messages quote, without this machine's paths
            seen = seen.replace(result["state_dir"], "<state_dir>")
        lines.append(f"| {f['fault']} | {f['when_s']} s | {f['expectation']} | {seen} | "
                     f"{'yes' if f['held'] else 'NO'} |")
    lines += ["", f"Checked from Slurm's commands and the SQLite files ({result['snapshots']} "
              "snapshots of the queue during the run, then once at the end):", ""]
    for rule, offenders in result["rules"].items():
        lines.append(f"- {rule}: " + ("held" if not offenders else
                                      "NOT held (" + "; ".join(offenders) + ")"))
    lines += ["", "Targets: " + "; ".join(
        f"{name}: {'-' if ok is None else 'met' if ok else 'NOT met'}"
        for name, ok in result["targets"].items()) + "."]
    return "\n".join(lines)
