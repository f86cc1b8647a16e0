"""``arnold bench placement --live``: our placement against Slurm's own choice, job by job, on
the live cluster, with each job's ranks read from its running tasks.

A seeded sequence of TP 8 jobs (4 to 16 nodes, PP 2 or 4) arrives on a cluster fragmented by
background jobs pinned to seeded nodes. Each job is run twice on the same cluster state:

- **ours**: ``arnold-sbatch --tp 8 --pp P`` (the SPANK plugin gives each task its rank,
  ``RANK``); then cancelled, and its nodes waited for;
- **Slurm's**: plain ``sbatch -N n --exclusive --ntasks-per-node=8``: the nodes topology/tree
  picks and the ranks its default task layout gives (``SLURM_PROCID``; on 26.05 that layout
  follows the topology). This one keeps running, so the cluster evolves as Slurm alone would
  make it (when a job would not fit, the oldest kept jobs end first).

Both are measured the same way: the nodes in the order of their lowest rank, read as Megatron
reads ranks (TP, then DP, then PP), give the DP and PP spreads and the weighted spread with
``ALPHA``. Reported per job and as the mean ratio ours / Slurm's (below 1: ours is tighter);
``ours_never_worse`` holds when no job's weighted spread is larger than Slurm's.
"""

from __future__ import annotations

import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hostlist

from slurm_arnold.errors import ArnoldError
from slurm_arnold.placement import JobShape, Placement
from slurm_arnold.placement.baselines import slurm_sort_key
from slurm_arnold.placement.engine import place_from_node_list
from slurm_arnold.slurm import Slurm
from slurm_arnold.snapshot.live import live_cluster
from slurm_arnold.topology import Topology

ALPHA = 0.5
TP = 8
TASKS_PER_NODE = 8
#: Share of the cluster the background jobs hold, on seeded nodes (1 to 3 per job).
BACKGROUND_SHARE = 0.35
#: Each task prints its node and rank (ours: the plugin's RANK; Slurm's: SLURM_PROCID).
REPORT = 'echo "R $SLURMD_NODENAME ${RANK:-$SLURM_PROCID}"'


@dataclass(frozen=True)
class LiveJob:
    """One job of the sequence."""

    nodes: int
    pp: int


def sequence(count: int, seed: int = 11) -> list[LiveJob]:
    """``count`` jobs of 4 to 16 nodes; PP 4 where it divides the nodes and the draw says so."""
    rng = random.Random(seed)
    jobs = []
    for _ in range(count):
        nodes = rng.choice((4, 8, 12, 16))
        jobs.append(LiveJob(nodes, 4 if nodes % 4 == 0 and rng.random() < 0.5 else 2))
    return jobs


def _script(ours: bool) -> str:
    flag = " --arnold-rankfile=auto" if ours else ""
    return f"#!/bin/bash\nsrun{flag} bash -c '{REPORT}'\nsleep 600\n"


def _ranked_nodes(path: Path, tasks: int) -> list[str] | None:
    """The job's nodes in the order of their lowest rank, once every task has reported."""
    try:
        lines = [line.split() for line in path.read_text().splitlines() if line.startswith("R ")]
    except OSError:
        return None
    if len(lines) < tasks:
        return None
    lowest: dict[str, int] = {}
    for _, node, rank in (line[:3] for line in lines if len(line) >= 3):
        lowest[node] = min(lowest.get(node, int(rank)), int(rank))
    return sorted(lowest, key=lowest.__getitem__)


class LiveRun:
    """Submits, reads back and cancels the sequence's jobs; cancels everything it started."""

    def __init__(self, slurm: Slurm, workdir: Path, timeout: float = 120.0) -> None:
        self.slurm = slurm
        self.workdir = workdir
        self.timeout = timeout
        self.started: list[int] = []
        self.bindir = Path(sys.executable).parent

    def submit(self, argv: list[str]) -> int:
        """Run an sbatch-like command; the job id."""
        proc = subprocess.run(argv, capture_output=True, text=True)
        out = proc.stdout.strip().split(";")[0]
        if proc.returncode != 0 or not out.isdigit():
            raise ArnoldError(f"{Path(argv[0]).name} failed: {proc.stderr.strip()[-300:]}")
        self.started.append(int(out))
        return int(out)

    def ranks(self, job: LiveJob, ours: bool, tag: str) -> tuple[int, list[str]]:
        """Run ``job`` one way; its id and its nodes in rank order."""
        out = self.workdir / f"{tag}.out"
        script = self.workdir / f"{tag}.sh"
        script.write_text(_script(ours))
        common = ["--parsable", "-N", str(job.nodes), "--exclusive", "--gpus-per-node=8",
                  f"--ntasks-per-node={TASKS_PER_NODE}", "-t", "10", "-o", str(out)]
        if ours:
            argv = [str(self.bindir / "arnold-sbatch"), *common, "--tp", str(TP), "--pp",
                    str(job.pp), "--alpha", str(ALPHA), str(script)]
        else:
            argv = ["sbatch", *common, str(script)]
        job_id = self.submit(argv)
        deadline = time.monotonic() + self.timeout
        while (nodes := _ranked_nodes(out, job.nodes * TASKS_PER_NODE)) is None:
            if time.monotonic() > deadline:
                raise ArnoldError(f"job {job_id} did not report its ranks within "
                                  f"{self.timeout:.0f} s (see {out})")
            time.sleep(0.3)
        return job_id, nodes

    def end(self, job_ids: list[int]) -> None:
        """Cancel jobs and wait until their nodes are free again."""
        if not job_ids:
            return
        self.slurm.run(["scancel", *map(str, job_ids)], check=False)
        deadline = time.monotonic() + self.timeout
        while any(j.job_id in job_ids for j in self.slurm.jobs(unfinished=True)):
            if time.monotonic() > deadline:
                raise ArnoldError(f"jobs {job_ids} did not end within {self.timeout:.0f} s")
            time.sleep(0.3)

    def free(self) -> set[str]:
        """The nodes free now (slurmctld marks a freed node a moment after its job ends)."""
        return set(live_cluster(self.slurm).free)

    def wait_free(self, nodes: set[str]) -> None:
        """Until every one of ``nodes`` is free."""
        deadline = time.monotonic() + self.timeout
        while not nodes <= self.free():
            if time.monotonic() > deadline:
                raise ArnoldError(f"nodes {hostlist.collect_hostlist(sorted(nodes))} not free "
                                  f"within {self.timeout:.0f} s")
            time.sleep(0.3)

    def cleanup(self) -> None:
        """Cancel every job this run started and wait until they are gone."""
        self.end(self.started)


def _background(run: LiveRun, topology: Topology, seed: int) -> None:
    rng = random.Random(seed)
    nodes = sorted(topology.node_leaf)
    busy = rng.sample(nodes, round(BACKGROUND_SHARE * len(nodes)))
    while busy:
        take = busy[:rng.randint(1, 3)]
        busy = busy[len(take):]
        run.submit(["sbatch", "--parsable", "-N", str(len(take)), "-w", ",".join(take),
                    "--exclusive", "-t", "15", "-o", "/dev/null", "--wrap", "sleep 900"])


def _row(job: LiveJob, ours: Placement, theirs: Placement, slurm_order: list[str],
         sort_key: Callable[[str], Any]) -> dict[str, Any]:
    def spreads(p: Placement) -> dict[str, Any]:
        m = p.metrics
        return {"max_dp_spread": m.max_dp_spread, "max_pp_spread": m.max_pp_spread,
                "weighted_spread": m.weighted_spread,
                "nodes": hostlist.collect_hostlist(sorted(p.nodes()))}

    return {"nodes": job.nodes, "pp": job.pp, "dp": job.nodes * TASKS_PER_NODE // (TP * job.pp),
            "ours": spreads(ours), "slurm": spreads(theirs),
            # Whether Slurm's ranks went to its nodes in name order (what --explain assumes).
            "slurm_ranks_in_name_order": slurm_order == sorted(slurm_order, key=sort_key),
            "ratio": round(ours.metrics.weighted_spread / theirs.metrics.weighted_spread, 3)
            if theirs.metrics.weighted_spread else 1.0}


def run(count: int = 6, seed: int = 11,
        progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The sequence, ours then Slurm's per job; every job it started is cancelled at the end
    (admin: it submits as the caller and cancels only its own jobs)."""
    slurm = Slurm()
    slurm.require_config()
    say = progress or (lambda _: None)
    deadline = time.monotonic() + 120
    while len((view := live_cluster(slurm)).free) < len(view.topology.node_leaf):
        if time.monotonic() > deadline:  # jobs of others' still ending are waited for
            raise ArnoldError("the cluster is not idle; the live placement bench needs it to "
                              "itself (cancel the running jobs first)")
        time.sleep(1)
    topology = view.topology
    rows = []
    with tempfile.TemporaryDirectory(prefix="arnold-bench-live-", dir=Path.cwd()) as tmp:
        work = Path(tmp)
        work.chmod(0o755)
        live = LiveRun(slurm, work)
        kept: list[tuple[int, list[str]]] = []
        try:
            _background(live, topology, seed)
            time.sleep(1)
            for i, job in enumerate(sequence(count, seed)):
                while len(live.free()) < job.nodes and kept:
                    job_id, nodes = kept.pop(0)  # the oldest of Slurm's jobs ends first
                    live.end([job_id])
                    live.wait_free(set(nodes))
                before = live.free()
                if len(before) < job.nodes:
                    raise ArnoldError(f"job {i}: {len(before)} free nodes for {job.nodes}")
                shape = JobShape(TP, job.pp, job.nodes * TASKS_PER_NODE // (TP * job.pp),
                                 TASKS_PER_NODE)
                say(f"job {i + 1}/{count}: {job.nodes} nodes, PP {job.pp}: ours")
                ours_id, ours_nodes = live.ranks(job, True, f"ours-{i}")
                live.end([ours_id])
                live.wait_free(before)
                say(f"job {i + 1}/{count}: Slurm's")
                slurm_id, slurm_nodes = live.ranks(job, False, f"slurm-{i}")
                kept.append((slurm_id, slurm_nodes))
                rows.append(_row(job,
                                 place_from_node_list("ours", ours_nodes, topology, shape, ALPHA),
                                 place_from_node_list("slurm", slurm_nodes, topology, shape,
                                                      ALPHA), slurm_nodes, slurm_sort_key))
        finally:
            live.cleanup()
    ratios = [r["ratio"] for r in rows]
    return {"slurm_version": ".".join(f"{v:02d}" if i else str(v)
                                      for i, v in enumerate(slurm.version())),
            "jobs": rows, "alpha": ALPHA, "seed": seed,
            "ratio_mean": round(statistics.fmean(ratios), 3) if ratios else None,
            "slurm_ranks_in_name_order": all(r["slurm_ranks_in_name_order"] for r in rows),
            "ours_never_worse": all(r["ours"]["weighted_spread"] <= r["slurm"]["weighted_spread"]
                                    for r in rows)}


def markdown(result: dict[str, Any], command: str) -> str:
    """The per-job table and the mean ratio."""
    lines = [f"## Placement live on Slurm {result['slurm_version']}: ours vs Slurm's own choice",
             "",
             f"Measured with `{command}` on the live local cluster (Slurm "
             f"{result['slurm_version']}, topology/tree): each job run by arnold-sbatch and by "
             "plain sbatch on the same cluster state, ranks read from the running tasks "
             f"(alpha {result['alpha']}; spreads: max DP / max PP / weighted).", "",
             "| job | nodes | PP x DP | ours | Slurm's own | ours / Slurm's |",
             "|---|---|---|---|---|---|"]
    for i, r in enumerate(result["jobs"], 1):
        o, s = r["ours"], r["slurm"]
        lines.append(f"| {i} | {r['nodes']} | {r['pp']} x {r['dp']} | {o['max_dp_spread']} / "
                     f"{o['max_pp_spread']} / {o['weighted_spread']:g} | {s['max_dp_spread']} / "
                     f"{s['max_pp_spread']} / {s['weighted_spread']:g} | {r['ratio']} |")
    order = ("in node-name order on every job (as `arnold place --explain` draws Slurm's "
             "layout)" if result["slurm_ranks_in_name_order"] else
             "not in node-name order on some jobs")
    lines += ["", f"Mean ratio ours / Slurm's weighted spread: **{result['ratio_mean']}**; "
              f"ours never worse, job by job: **{result['ours_never_worse']}**. Slurm's default "
              f"task layout put its ranks {order}."]
    return "\n".join(lines)
