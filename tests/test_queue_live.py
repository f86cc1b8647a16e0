"""Placements that follow the job, live: a job that cannot start now is queued (never refused),
moved to nodes that free first, and repaired when a planned node is drained under it.

Jobs are submitted by a real Unix user through the site install (``setpriv``, only HOME, PATH
and SLURM_CONF set); ``arnold reserve sync`` runs as root, the admin side, the way the site's
loop would. Root is needed to make the user; the tests skip with a message without it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks import multiuser
from benchmarks.multiuser import as_user, home
from site_config import SiteConfig
from slurm_arnold.rankorder import parse
from slurm_arnold.slurm import JobInfo, Slurm
from tests.conftest import wait_for_job

pytestmark = pytest.mark.live
USER = multiuser.USERS[0]
SCRIPT = """#!/bin/bash
srun --arnold-rankfile=auto bash -c 'echo "RANKS $SLURMD_NODENAME $SLURM_LOCALID $RANK \
$LOCAL_RANK $ARNOLD_TP_RANK $ARNOLD_PP_RANK $ARNOLD_DP_RANK"'
"""


@pytest.fixture(autouse=True)
def clean(slurm: Slurm) -> Iterator[None]:
    """No jobs, drained nodes or arnold reservations before and after each test."""
    _clean(slurm)
    yield
    _clean(slurm)


def _clean(slurm: Slurm) -> None:
    for user in (USER, "root"):
        subprocess.run(["scancel", "-u", user], capture_output=True)
    drained = [n.name for n in slurm.nodes() if n.flags & {"DRAIN", "DRAINING", "DRAINED"}]
    if drained:
        subprocess.run(["scontrol", "update", f"NodeName={','.join(drained)}",
                        "State=RESUME"], capture_output=True)
    deadline = time.monotonic() + 60
    while any(j.state in ("RUNNING", "PENDING", "COMPLETING") for j in slurm.jobs()):
        assert time.monotonic() < deadline, "the queue did not empty"
        time.sleep(0.3)
    _sync()  # deletes arnold reservations whose jobs are gone


def _sync() -> list[str]:
    proc = subprocess.run([str(multiuser.site_venv() / "bin" / "arnold"), "reserve", "sync",
                           "--json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return list(json.loads(proc.stdout))


def _block(nodes: str, seconds: int, limit_min: int) -> int:
    out = subprocess.run(["sbatch", "--parsable", "-w", nodes, "-N",
                          str(len(_expand(nodes))), "--exclusive", "-t", str(limit_min),
                          "-o", "/dev/null", "--wrap", f"sleep {seconds}"],
                         capture_output=True, text=True, check=True).stdout
    return int(out.strip())


def _expand(nodes: str) -> list[str]:
    import hostlist

    return list(hostlist.expand_hostlist(nodes))


def _job(slurm: Slurm, job_id: int) -> JobInfo:
    return {j.job_id: j for j in slurm.jobs()}[job_id]


def _wait_running(slurm: Slurm, job_ids: list[int], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not all(_job(slurm, i).state == "RUNNING" for i in job_ids):
        assert time.monotonic() < deadline, [(i, _job(slurm, i).state) for i in job_ids]
        time.sleep(0.2)


def _submit(*args: str, parsable: bool = True) -> subprocess.CompletedProcess[str]:
    script = home(USER) / "queue.sh"
    script.write_text(SCRIPT)
    os.chmod(script, 0o644)
    argv = [str(multiuser.site_venv() / "bin" / "arnold-sbatch"),
            *(["--parsable"] if parsable else []), "--ntasks-per-node=8",
            "--gpus-per-node=8", "--exclusive", "-t", "3", "-o",
            str(home(USER) / "queue-%j.out"), *args, str(script)]
    return subprocess.run(as_user(USER, argv), capture_output=True, text=True, cwd="/")


def _check_ranks(site: SiteConfig, job_id: int, ran_on: set[str]) -> None:
    """Every task's ranks are its entry in the rank file the plugin used: the admin side's
    for a job placed again, else the one arnold-sbatch wrote."""
    override = site.state_dir / "rankorder" / f"{job_id}.rankorder"
    if override.exists():
        text = override.read_text()
    else:
        spec = json.loads((site.users_dir / USER / "specs" / f"{job_id}.json").read_text())
        text = (site.users_dir / USER / "rankorder" /
                f"{spec['placement_id']}.rankorder").read_text()
    header, entries = parse(text)
    assert {e.node for e in entries} == ran_on
    want = {(e.node, e.local_rank): e for e in entries}
    lines = [line.split()[1:] for line in
             (home(USER) / f"queue-{job_id}.out").read_text().splitlines()
             if line.startswith("RANKS ")]
    assert len(lines) == len(entries) == int(header["world_size"])
    for node, local_id, rank, local_rank, tp, pp, dp in lines:
        e = want[(node, int(local_id))]
        assert (int(rank), int(local_rank), int(tp), int(pp), int(dp)) == (
            e.rank, e.local_rank, e.tp, e.pp, e.dp)


def _ran_on(slurm: Slurm, job_id: int) -> set[str]:
    """The nodes the job ran on, from slurmdbd's whole record; the job must have completed."""
    record = slurm.finished_accounting([job_id])[job_id]
    assert record.state == "COMPLETED", record
    return set(record.nodes)


def test_a_job_that_cannot_start_now_is_queued_not_refused_and_runs_with_its_ranks(
        slurm: Slurm, site: SiteConfig) -> None:
    blocker = _block("n[001-052]", 15, 2)
    _wait_running(slurm, [blocker])
    proc = _submit("-N", "16", "--tp", "8", "--pp", "4", parsable=False)
    assert proc.returncode == 0, proc.stderr
    match = re.fullmatch(r"Submitted batch job (\d+)\n", proc.stdout)  # sbatch's own line
    assert match, proc.stdout
    job_id = int(match.group(1))
    assert "Traceback" not in proc.stderr and "error" not in proc.stderr
    job = _job(slurm, job_id)
    assert job.state == "PENDING" and len(job.required_nodes) == 16
    assert set(job.required_nodes) <= set(_expand("n[001-052]"))  # the nodes that drain first
    record = _record(job_id)
    assert record["status"] == "queued" and set(record["nodes"]) == set(job.required_nodes)
    assert _sync() == []  # nothing free, nothing failed: nothing to do
    assert wait_for_job(slurm, job_id, timeout=120) == "COMPLETED"
    ran = _ran_on(slurm, job_id)
    assert ran == set(job.required_nodes)
    _check_ranks(site, job_id, ran)


def _record(job_id: int) -> dict[str, Any]:
    proc = subprocess.run(as_user(USER, [str(multiuser.site_venv() / "bin" / "arnold"),
                                         "jobs", "--json"]),
                          capture_output=True, text=True, cwd="/")
    assert proc.returncode == 0, proc.stderr
    return dict(next(r for r in json.loads(proc.stdout) if r["slurm_job_id"] == job_id))


def test_a_queued_job_moves_to_nodes_that_free_first(slurm: Slurm, site: SiteConfig) -> None:
    # By their time limits n[001-016] free first; in fact the others do. They end when the
    # test says so, not after a few seconds of their own: on a loaded machine those seconds
    # had passed before arnold-sbatch read the cluster (seen in CI), and the job started there.
    slow = _block("n[001-016]", 120, 2)
    fast = _block("n[017-064]", 300, 10)
    _wait_running(slurm, [slow, fast])
    proc = _submit("-N", "16", "--tp", "8", "--pp", "4")
    assert proc.returncode == 0, proc.stderr
    job_id = int(proc.stdout)
    assert set(_job(slurm, job_id).required_nodes) == set(_expand("n[001-016]"))
    slurm.cancel(fast)
    assert wait_for_job(slurm, fast, timeout=60) == "CANCELLED"
    actions = _sync()
    assert len(actions) == 1 and actions[0].startswith(f"bound job {job_id} on "), actions
    moved = set(_job(slurm, job_id).required_nodes)
    assert not moved & set(_expand("n[001-016]")) and len(moved) == 16
    assert wait_for_job(slurm, job_id, timeout=90) == "COMPLETED"
    _check_ranks(site, job_id, _ran_on(slurm, job_id))
    shown = _record(job_id)
    assert shown["binding"]["kind"] == "bind"
    assert set(shown["nodes"]) == moved
    # The table for people, piped at 80 columns: every cell whole (folded, never cut to "…").
    table = subprocess.run(as_user(USER, [str(multiuser.site_venv() / "bin" / "arnold"),
                                          "jobs"], env={"COLUMNS": "80"}),
                           capture_output=True, text=True, cwd="/").stdout
    assert "…" not in table and max(len(line) for line in table.splitlines()) <= 80
    assert str(job_id) in table and "bound" in table
    # The rank file's path (a dozen folded lines at 80 columns) only with -v.
    assert "rankorder" not in table
    verbose = subprocess.run(as_user(USER, [str(multiuser.site_venv() / "bin" / "arnold"), "-v",
                                            "jobs"], env={"COLUMNS": "200"}),
                             capture_output=True, text=True, cwd="/").stdout
    assert shown["rankfile"] in verbose
    slurm.cancel(slow)


def test_draining_a_planned_node_of_a_waiting_large_job_repairs_its_plan(
        slurm: Slurm, site: SiteConfig) -> None:
    blocker = _block("n[001-048]", 20, 2)
    _wait_running(slurm, [blocker])
    proc = _submit("-N", "32", "--tp", "8", "--pp", "4")  # 256 GPUs: a large job
    assert proc.returncode == 0, proc.stderr
    lpj = int(proc.stdout)
    assert any(a.startswith(f"created arnold_{lpj}") for a in _sync())
    planned = set(_job(slurm, lpj).required_nodes)
    busy = sorted(planned & set(_expand("n[001-048]")))
    assert busy, "the plan should use nodes that are still busy"
    victim = busy[0]  # still running the blocker: drained, not down
    subprocess.run(["scontrol", "update", f"NodeName={victim}", "State=DRAIN",
                    "Reason=arnold-test maintenance"], check=True, capture_output=True)
    t0 = time.monotonic()
    actions = _sync()
    repair_s = time.monotonic() - t0
    assert any(a.startswith(f"repaired job {lpj} on ") for a in actions), actions
    job = _job(slurm, lpj)
    res = {r.name: r for r in slurm.reservations()}[f"arnold_{lpj}"]
    assert victim not in job.required_nodes and victim not in res.nodes
    assert set(job.required_nodes) == set(res.nodes) and len(res.nodes) == 32
    assert repair_s < 30
    listed = json.loads(subprocess.run(
        as_user(USER, [str(multiuser.site_venv() / "bin" / "arnold"), "reserve", "list",
                       "--json"]), capture_output=True, text=True, cwd="/").stdout)
    row = next(r for r in listed if r["lpj_job_id"] == lpj)
    assert row["repairs"] and victim in row["repairs"][-1]["previous"]
    assert wait_for_job(slurm, lpj, timeout=120) == "COMPLETED"
    ran = _ran_on(slurm, lpj)
    assert victim not in ran
    _check_ranks(site, lpj, ran)
    # Ended: the first sync deletes its reservation, the second has nothing to do.
    assert any(a.startswith(f"deleted arnold_{lpj}") for a in _sync())
    assert not [r for r in slurm.reservations() if r.name.startswith("arnold_")]
    assert _sync() == []


def test_a_waiting_large_job_whose_nodes_now_drain_later_is_planned_afresh(
        slurm: Slurm, site: SiteConfig) -> None:
    # By their limits (the predictions without a model) n[001-032] drain first; then the
    # admin raises their job's limit past the others': the plan and its reservation move.
    first = _block("n[001-032]", 300, 20)
    rest = _block("n[033-064]", 300, 30)
    _wait_running(slurm, [first, rest])
    proc = _submit("-N", "32", "--tp", "8", "--pp", "4")  # 256 GPUs: a large job
    assert proc.returncode == 0, proc.stderr
    lpj = int(proc.stdout)
    assert set(_job(slurm, lpj).required_nodes) == set(_expand("n[001-032]"))
    assert any(a.startswith(f"created arnold_{lpj}") for a in _sync())
    assert _sync() == []  # its plan is still the best: nothing moves
    subprocess.run(["scontrol", "update", f"JobId={first}", "TimeLimit=60"], check=True,
                   capture_output=True)
    actions = _sync()
    assert len(actions) == 1 and actions[0].startswith(f"replanned job {lpj} on "), actions
    assert "drain in 60 min, these in 30 min" in actions[0]  # minutes, rounded
    job = _job(slurm, lpj)
    res = {r.name: r for r in slurm.reservations()}[f"arnold_{lpj}"]
    assert set(job.required_nodes) == set(res.nodes) == set(_expand("n[033-064]"))
    assert _sync() == []  # moved once, not back and forth
    shown = _record(lpj)
    assert shown["binding"]["kind"] == "replan" and set(shown["nodes"]) == set(res.nodes)
    table = subprocess.run(as_user(USER, [str(multiuser.site_venv() / "bin" / "arnold"),
                                          "jobs"], env={"COLUMNS": "200"}),
                           capture_output=True, text=True, cwd="/")
    assert "replanned" in table.stdout, table.stdout
    slurm.cancel(first)
    slurm.cancel(rest)
    assert wait_for_job(slurm, lpj, timeout=120) == "COMPLETED"
    ran = _ran_on(slurm, lpj)
    assert ran == set(res.nodes)
    _check_ranks(site, lpj, ran)  # the admin side's rank file for the new nodes


def test_a_queued_job_is_planned_and_repaired_only_on_nodes_its_options_allow(
        slurm: Slurm, site: SiteConfig) -> None:
    # By their limits n[001-032] drain first, but the job excludes them (-x): its plan, and
    # the repair after one of its planned nodes is drained, stay on the others.
    first = _block("n[001-032]", 300, 3)
    rest = _block("n[033-064]", 300, 10)
    _wait_running(slurm, [first, rest])
    proc = _submit("-N", "16", "--tp", "8", "--pp", "2", "-x", "n[001-032]")
    assert proc.returncode == 0, proc.stderr
    job_id = int(proc.stdout)
    excluded = set(_expand("n[001-032]"))
    planned = set(_job(slurm, job_id).required_nodes)
    assert len(planned) == 16 and not planned & excluded
    victim = sorted(planned)[0]
    subprocess.run(["scontrol", "update", f"NodeName={victim}", "State=DRAIN",
                    "Reason=arnold-test maintenance"], check=True, capture_output=True)
    actions = _sync()
    assert any(a.startswith(f"repaired job {job_id} on ") for a in actions), actions
    repaired = set(_job(slurm, job_id).required_nodes)
    assert len(repaired) == 16 and victim not in repaired and not repaired & excluded
    # A job that can fit nowhere its options allow is refused with one line.
    proc = _submit("-N", "40", "--tp", "8", "--pp", "5", "-x", "n[001-032]")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "only 31 of partition" in proc.stderr and "-x/-w/-C" in proc.stderr, proc.stderr


def test_bench_queue_quick(slurm: Slurm, site: SiteConfig) -> None:
    proc = subprocess.run([str(Path(sys.executable).parent / "arnold"), "bench", "queue",
                           "--quick", "--json"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["jobs"] == 4 and doc["refused"] == 0 and doc["errors"] == []
    assert len(doc["per_job"]) == 4
    assert all(r["slurm_spread"] >= 1 and r["arnold_spread"] >= 1 for r in doc["per_job"])
    assert doc["wait_ratio"] is not None and doc["slurm_mean_weighted_spread"] >= 1
