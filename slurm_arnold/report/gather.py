"""One snapshot of the cluster and the site's state for the admins' page and metrics.

Read, never solved again: node states from Slurm; each arnold job's layout from the rank file
its tasks read (the admin side's, when the prolog or ``sync`` rewrote it, else the one
arnold-sbatch wrote) and its placement record (spreads, solve time, what Slurm alone would
have chosen); reservations, admissions and repairs from the site database
(``Reserver.listing``); the predictor from the serving model's metadata, the last retrain's
outcome and the admission decisions of jobs that have since finished.
"""

from __future__ import annotations

import json
import math
import pwd
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from site_config import SiteConfig
from slurm_arnold.errors import ArnoldError
from slurm_arnold.slurm import JobInfo, Slurm
from slurm_arnold.snapshot.live import live_cluster
from slurm_arnold.snapshot.view import ClusterView
from slurm_arnold.topology import Topology

#: What holds a node, in the page's legend order (one CSS class each).
NODE_STATES = ("arnold", "reserved", "busy", "free", "drained", "down")
#: Node flags the page shows as drained or down. Not UNAVAILABLE_FLAGS as a whole: it holds
#: PLANNED, which 22.05's backfill sets on idle nodes it keeps for a pending job (a reserved
#: large job's nodes among them), and those are reserved, not drained.
DRAINED_FLAGS = frozenset({"DRAIN", "DRAINING", "DRAINED", "FAIL", "FAILING", "MAINT",
                           "MAINTENANCE", "REBOOT_REQUESTED", "REBOOT_ISSUED", "INVALID_REG"})
DOWN_FLAGS = frozenset({"DOWN", "NOT_RESPONDING", "POWERED_DOWN", "POWERING_DOWN",
                        "POWER_DOWN", "POWERING_UP", "FUTURE"})
#: Finished admissions the predictor's recent accuracy is measured on (most recent first).
RECENT_DECISIONS = 500


@dataclass
class NodeView:
    """One node: what holds it and, for an arnold job, the cell it serves."""

    name: str
    leaf: str
    minipod: str
    state: str
    job_id: int | None = None
    user: str | None = None
    stage: int | None = None
    replica: int | None = None
    reservation: str | None = None
    reason: str = ""


@dataclass
class ArnoldJob:
    """A job arnold-sbatch placed (or one with ``#ARNOLD`` lines the prolog mapped)."""

    job_id: int
    user: str
    state: str
    nodes: list[str]
    tp: int
    pp: int
    dp: int
    layout: dict[str, tuple[int, int]]  # node -> (stage, replica)
    max_dp_spread: int | None
    max_pp_spread: int | None
    weighted_spread: float | None
    slurm_alone: dict[str, Any] | None
    solve_seconds: float | None
    repairs: int
    why: str = ""


@dataclass
class Report:
    """Everything the page and the metrics show."""

    generated_at: float
    slurm_version: str
    topology: Topology
    nodes: dict[str, NodeView]
    jobs: list[ArnoldJob]
    reservations: list[dict[str, Any]]
    predictor: dict[str, Any]
    admissions: dict[str, int] = field(default_factory=dict)
    repairs: dict[str, int] = field(default_factory=dict)

    @property
    def waiting(self) -> list[ArnoldJob]:
        """Arnold jobs not started yet, first submitted first."""
        return [j for j in self.jobs if j.state == "PENDING"]

    @property
    def running(self) -> list[ArnoldJob]:
        """Arnold jobs running now."""
        return [j for j in self.jobs if j.state == "RUNNING"]

    def counts(self) -> dict[str, int]:
        """Nodes per state."""
        out = dict.fromkeys(NODE_STATES, 0)
        for node in self.nodes.values():
            out[node.state] += 1
        return out


def _minutes(seconds: float) -> str:
    minutes = max(0, round(seconds / 60))
    return f"~{minutes} min" if minutes < 120 else f"~{minutes / 60:.1f} h"


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _layout(config: SiteConfig, job: JobInfo, uid: int,
            placement_id: str | None) -> dict[str, tuple[int, int]]:
    """node -> (stage, replica) from the rank file the job's tasks read (or will): the admin
    side's (in the admin's own directory), else the user's, trusted as the plugin trusts
    it (owned by the user or root, writable by no one else)."""
    from slurm_arnold.prolog import admin_rankfile, rankfile_entries

    candidates: list[tuple[Path, int | None]] = [(admin_rankfile(config, job.job_id), None)]
    if placement_id:
        candidates.append((config.users_dir / job.user / "rankorder" /
                           f"{placement_id}.rankorder", uid))
    for path, owner in candidates:
        entries = rankfile_entries(path, owner)
        if entries is not None:
            return {e.node: (e.pp, e.dp) for e in entries}
    return {}


def _placement_record(config: SiteConfig, user: str, job_id: int) -> dict[str, Any] | None:
    """The placement arnold-sbatch recorded in the user's database (read-only), if any."""
    from slurm_arnold.site_state import user_db_path

    path = user_db_path(config, user)
    if not path.exists():
        return None
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as db:
            row = db.execute("select placement from jobs where slurm_job_id = ? order by id "
                             "desc limit 1", (job_id,)).fetchone()
    except sqlite3.Error:
        return None
    if row is None or not row[0]:
        return None
    try:
        data = json.loads(row[0])
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _arnold_job(config: SiteConfig, job: JobInfo, view: ClusterView,
                repairs: dict[int, int], reservations: dict[str, dict[str, Any]],
                now: float) -> ArnoldJob | None:
    from slurm_arnold.placement.plan import measure
    from slurm_arnold.submit.spec import BadSpec, read_spec

    try:
        uid = pwd.getpwnam(job.user).pw_uid
        spec = read_spec(config, job.user, uid, job.job_id)
    except (KeyError, BadSpec):
        return None
    if spec is None:
        return None
    record = _placement_record(config, job.user, job.job_id) or {}
    nodes = list(job.nodes or job.required_nodes or record.get("nodes") or [])
    layout = _layout(config, job, uid, spec.placement_id)
    layout = {n: cell for n, cell in layout.items() if n in set(nodes)} if nodes else layout
    metrics: dict[str, Any] = {}
    if layout and all(n in view.topology.node_leaf for n in layout):
        cells: dict[tuple[int, int], list[str]] = {}
        for node, cell in layout.items():
            cells.setdefault(cell, []).append(node)
        metrics = measure(cells, spec.shape, view.topology, spec.alpha).as_dict()
    elif isinstance(record.get("metrics"), dict):
        metrics = record["metrics"]
    result = ArnoldJob(
        job.job_id, job.user, job.state, nodes, spec.tp, spec.pp, spec.dp, layout,
        metrics.get("max_dp_spread"), metrics.get("max_pp_spread"),
        metrics.get("weighted_spread"), record.get("slurm_alone"),
        record.get("solve_seconds"), repairs.get(job.job_id, 0))
    if job.state == "PENDING":
        result.why = _why(job, view.topology, reservations, now)
    return result


def _why(job: JobInfo, topology: Topology, reservations: dict[str, dict[str, Any]],
         now: float) -> str:
    """Why a job waits, in words its user understands."""
    res = reservations.get(job.reservation or "")
    if res is not None:
        start = res.get("expected_start")
        when = f", expected to start in {_minutes(start - now)}" if start else ""
        return f"reserved on its {len(res.get('nodes') or [])} nodes{when}"
    if job.held:
        return "held (scontrol release it, or wait for arnold to release it)"
    if job.required_nodes and job.reason in ("Resources", "Priority", "ReqNodeNotAvail",
                                             "Reservation"):
        pods = {topology.minipod_of(n) for n in job.required_nodes
                if n in topology.node_leaf}
        where = f"in {len(pods)} minipod{'s' if len(pods) != 1 else ''}" if pods else ""
        ahead = " behind higher-priority jobs" if job.reason == "Priority" else ""
        count = len(job.required_nodes)
        return (f"waiting{ahead} for its {count} planned node{'s' if count != 1 else ''} "
                f"{where} to drain").replace("  ", " ")
    if job.reason == "Priority":
        return "behind higher-priority jobs"
    if job.reason == "Resources":
        return f"waiting for {job.node_count} nodes to become free"
    return f"Slurm says: {job.reason or 'pending'}"


def _predictor(config: SiteConfig, site: sqlite3.Connection | None, now: float,
               ) -> dict[str, Any]:
    """The serving model's age and training facts, the last retrain's outcome, and accuracy
    on recently finished jobs that had an admission decision (point and upper prediction)."""
    from slurm_arnold.site_state import last_retrain_path, model_dir

    out: dict[str, Any] = {"model": None, "last_retrain": _read_json(last_retrain_path(config)),
                           "recent": None, "points": []}
    meta_path = model_dir(config) / "metadata.json"
    meta = _read_json(meta_path)
    if meta is not None:
        out["model"] = {"age_s": round(now - meta_path.stat().st_mtime),
                        "train_jobs": meta.get("train_jobs"), "quantile": meta.get("quantile"),
                        "holdout": meta.get("holdout")}
    if site is None:
        return out
    try:
        rows = site.execute(
            "select a.predicted_s, a.upper_s, h.end - h.start from admissions a join history h"
            " on h.job_id = cast(a.job_id as text) where h.end > h.start and a.predicted_s > 0"
            " order by a.last_decided_at desc limit ?", (RECENT_DECISIONS,)).fetchall()
    except sqlite3.Error:
        rows = []
    if rows:
        errors = [abs(math.log(max(p, 1)) - math.log(max(a, 1))) for p, _, a in rows]
        covered = [a <= u for _, u, a in rows if u]
        out["recent"] = {"jobs": len(rows), "mae_log": round(sum(errors) / len(errors), 3),
                         "coverage": round(sum(covered) / len(covered), 3) if covered else None}
        out["points"] = [(float(p), float(u or 0), float(a)) for p, u, a in rows]
    return out


def gather(config: SiteConfig, slurm: Slurm | None = None, *,
           topology: Topology | None = None) -> Report:
    """The report now: from the live cluster, or (``topology``) a cluster described by a
    topology file alone, every node free (to see the page at any size)."""
    now = time.time()
    if topology is not None:
        from slurm_arnold.snapshot.view import offline_cluster

        view = offline_cluster(topology, 8)
        return Report(now, "none (topology file)", topology, _nodes(view, {}, {}), [], [],
                      {"model": None, "last_retrain": None, "recent": None, "points": []})
    slurm = slurm or Slurm()
    slurm.require_config()
    from reservations.reserver import Reserver
    from slurm_arnold.site_state import open_site_db

    view = live_cluster(slurm, minipod_level=config.minipod_level, partition=config.partition)
    try:
        state = open_site_db(config)
    except ArnoldError:
        state = None
    reservations: list[dict[str, Any]] = []
    admissions: dict[str, int] = {}
    repairs: dict[str, int] = {}
    per_job_repairs: dict[int, int] = {}
    site: sqlite3.Connection | None = None
    if state is not None:
        reservations = Reserver(config, state, slurm).listing()
        site = state.db.conn
        for decision, count in site.execute(
                "select decision, count(*) from admissions group by decision"):
            admissions[str(decision)] = int(count)
        for kind, job_id in site.execute("select kind, job_id from bindings"):
            repairs[str(kind)] = repairs.get(str(kind), 0) + 1
            per_job_repairs[int(job_id)] = per_job_repairs.get(int(job_id), 0) + 1
    admitted_by: dict[str, list[dict[str, Any]]] = {}
    if site is not None:
        for name, job_id, user, upper_s, decided in site.execute(
                "select reservation, job_id, user, upper_s, last_decided_at from admissions "
                "where decision = 'admit'"):
            admitted_by.setdefault(str(name), []).append(
                {"job_id": int(job_id), "user": user,
                 "predicted_end": float(decided) + float(upper_s or 0)})
    for res in reservations:
        res["admitted_jobs"] = [a for a in admitted_by.get(res["name"], [])
                                if a["job_id"] in set(res.get("admitted") or [])]
    by_name = {r["name"]: r for r in reservations}
    jobs = []
    queue = sorted(slurm.jobs(unfinished=True), key=lambda j: (j.submit_time or 0, j.job_id))
    for job in queue:
        if job.state not in ("PENDING", "RUNNING"):
            continue
        found = _arnold_job(config, job, view, per_job_repairs, by_name, now)
        if found is not None:
            jobs.append(found)
    report = Report(now, ".".join(f"{v:02d}" if i else str(v)
                                  for i, v in enumerate(slurm.version())),
                    view.topology, _nodes(view, {j.job_id: j for j in queue},
                                          {j.job_id: j for j in jobs}, reservations),
                    jobs, reservations, _predictor(config, site, now), admissions, repairs)
    if state is not None:
        state.close()
    return report


def _nodes(view: ClusterView, queue: dict[int, JobInfo], ours: dict[int, ArnoldJob],
           reservations: list[dict[str, Any]] | None = None) -> dict[str, NodeView]:
    holder: dict[str, JobInfo] = {}
    for job in queue.values():
        if job.state == "RUNNING":
            for n in job.nodes:
                holder[n] = job
    reserved = {n: r["name"] for r in reservations or [] for n in r.get("nodes") or []}
    out = {}
    topo = view.topology
    for name in topo.nodes:
        info = view.nodes.get(name)
        node = NodeView(name, topo.leaf_of(name), topo.minipod_of(name), "free",
                        reservation=reserved.get(name))
        flags = info.flags if info else frozenset()
        base = info.state if info else "IDLE"
        running = holder.get(name)
        if running is not None:
            node.job_id, node.user = running.job_id, running.user
            mine = ours.get(running.job_id)
            if mine is not None and name in mine.layout:
                node.state = "arnold"
                node.stage, node.replica = mine.layout[name]
            else:
                node.state = "busy"
        elif base in DOWN_FLAGS or flags & DOWN_FLAGS:
            node.state = "down"
        elif base in DRAINED_FLAGS or flags & DRAINED_FLAGS:
            node.state = "drained"
        elif node.reservation is not None:
            node.state = "reserved"
        if info is not None and node.state in ("down", "drained"):
            node.reason = "+".join([base, *sorted(flags)])
        out[name] = node
    return out

