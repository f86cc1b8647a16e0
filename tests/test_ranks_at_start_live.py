"""Ranks for the nodes a job actually runs on, live: arnold-prolog (slurmctld's
PrologSlurmctld, set up by ``make cluster``) maps jobs at start; a ``--requeue`` job that loses
a node is repaired by ``arnold reserve sync`` and restarts with ranks for its new nodes.

Jobs run as a real Unix user (``benchmarks.multiuser``) through the site install; root is
needed to make the user, to play the admin side and to kill a node's slurmd.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from benchmarks.multiuser import USERS, as_user, home, site_venv
from slurm_arnold.prolog import admin_rankfile
from slurm_arnold.rankorder import parse
from slurm_arnold.site_state import open_site_db
from slurm_arnold.slurm import Slurm
from slurm_arnold.topology import read_topology_file
from tests.conftest import REPO, tree_nodes, wait_for_job

pytestmark = pytest.mark.live
BIN = Path(sys.executable).parent
REPORT = ('echo "R $SLURMD_NODENAME $SLURM_LOCALID $RANK $LOCAL_RANK $WORLD_SIZE '
          '$ARNOLD_TP_RANK $ARNOLD_PP_RANK $ARNOLD_DP_RANK $SLURM_PROCID"')


def _run_as(user: str, argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(as_user(user, argv), capture_output=True, text=True, cwd=cwd,
                          timeout=60)


def _idle_by_minipod(slurm: Slurm, conf_dir: Path) -> dict[str, list[str]]:
    topo = read_topology_file(str(conf_dir / "topology.conf"))
    busy = {n for j in slurm.jobs(unfinished=True) for n in (*j.nodes, *j.required_nodes)}
    out: dict[str, list[str]] = {}
    for node in tree_nodes(slurm):
        if node.state == "IDLE" and not node.flags and node.name not in busy:
            out.setdefault(topo.minipod_of(node.name), []).append(node.name)
    return {pod: sorted(nodes) for pod, nodes in out.items()}


def _ranks_match(output: str, rankfile: Path, nodes: set[str], world: int, *,
                 procid_is_rank: bool = False) -> dict[str, Any]:
    """Every task's RANK, LOCAL_RANK and TP/PP/DP coordinates are its rank file's, the file
    is for exactly ``nodes``, and every rank is taken once; with ``procid_is_rank`` srun's
    own task order (SLURM_PROCID, from the admin side's host file) follows the ranks too."""
    header, entries = parse(rankfile.read_text())
    assert {e.node for e in entries} == nodes
    planned = {(e.node, e.local_rank): e for e in entries}
    lines = [ln.split()[1:] for ln in output.splitlines() if ln.startswith("R ")]
    assert len(lines) == world, output
    seen = set()
    for node, localid, rank, local, size, tp, pp, dp, procid in lines:
        e = planned[(node, int(localid))]
        assert (int(rank), int(local), int(tp), int(pp), int(dp)) == (
            e.rank, e.local_rank, e.tp, e.pp, e.dp)
        assert int(size) == world
        assert not procid_is_rank or int(procid) == int(rank)
        seen.add(int(rank))
    assert seen == set(range(world))
    return header


def _bindings(site: Any, job_id: int) -> list[dict[str, Any]]:
    state = open_site_db(site)
    try:
        return list(state.db["bindings"].rows_where("job_id = ?", [job_id], order_by="id"))
    finally:
        state.close()


def test_a_plain_sbatch_job_with_arnold_lines_gets_ranks_for_its_allocation(
        site: Any, slurm: Slurm, slurm_conf_dir: Path) -> None:
    user = USERS[0]
    pods = _idle_by_minipod(slurm, slurm_conf_dir)
    spread = [pod for pod in sorted(pods) if len(pods[pod]) >= 2][:4]
    assert len(spread) == 4, "needs two idle nodes in each of four minipods"
    nodes = [n for pod in spread for n in pods[pod][:2]]
    work = home(user)
    tag = uuid.uuid4().hex[:8]  # job ids repeat when the cluster is made afresh; homes stay
    script = work / "plain-arnold.sh"
    script.write_text("#!/bin/bash\n#ARNOLD --tp 8 --pp 2 --alpha 0.75\n"
                      f"srun --arnold-rankfile=auto bash -c '{REPORT}'\n")
    os.chown(script, *_ids(user))
    proc = _run_as(user, ["sbatch", "--parsable", "-N", "8", "-w", ",".join(nodes),
                          "--ntasks-per-node=8", "--gpus-per-node=8", "--exclusive", "-t", "5",
                          "-o", str(work / f"plain-{tag}-%j.out"), str(script)], work)
    assert proc.returncode == 0, proc.stderr
    job_id = int(proc.stdout)
    out = work / f"plain-{tag}-{job_id}.out"
    assert wait_for_job(slurm, job_id) == "COMPLETED", out.read_text()
    rankfile = admin_rankfile(site, job_id)
    _ranks_match(out.read_text(), rankfile, set(nodes), 64)
    row = _bindings(site, job_id)[-1]
    assert row["kind"] == "start" and "#ARNOLD lines" in row["reason"]
    # Never worse than Slurm's own order on the same nodes (the row holds both).
    assert row["weighted_spread"] <= row["previous_spread"]
    # The prolog's own time, from its process's start: Python's start-up alone is more than
    # a hundredth of a second, and slurmctld's PrologSlurmctld timeout is far above a minute.
    state = open_site_db(site)
    try:
        runs = list(state.db["prolog_runs"].rows_where("job_id = ?", [job_id]))
    finally:
        state.close()
    assert [r["outcome"] for r in runs] == ["mapped"]
    assert 0.01 < runs[0]["seconds"] < 60


def test_a_plain_job_without_arnold_lines_is_left_alone(site: Any, slurm: Slurm) -> None:
    user = USERS[0]
    work = home(user)
    proc = _run_as(user, ["sbatch", "--parsable", "-N", "2", "-t", "5", "-o", "/dev/null",
                          "--wrap", "true"], work)
    assert proc.returncode == 0, proc.stderr
    job_id = int(proc.stdout)
    assert wait_for_job(slurm, job_id) == "COMPLETED"
    assert not admin_rankfile(site, job_id).exists()
    assert _bindings(site, job_id) == []


def test_an_arnold_job_moved_by_an_admin_gets_ranks_for_where_it_runs(
        site: Any, slurm: Slurm, slurm_conf_dir: Path) -> None:
    user = USERS[1]
    work = home(user)
    tag = uuid.uuid4().hex[:8]
    sbatch = str(site_venv() / "bin" / "arnold-sbatch")
    proc = _run_as(user, [sbatch, "--parsable", "--hold", "-N", "4", "--ntasks-per-node=8",
                          "--gpus-per-node=8", "--exclusive", "-t", "5",
                          "-o", str(work / f"moved-{tag}-%j.out"), "--tp", "8", "--pp", "2",
                          "--wrap", f"srun --arnold-rankfile=auto bash -c '{REPORT}'"], work)
    assert proc.returncode == 0, proc.stderr
    job_id = int(proc.stdout)
    planned = set(slurm.job(job_id).required_nodes)  # type: ignore[union-attr]
    pods = _idle_by_minipod(slurm, slurm_conf_dir)
    elsewhere = [n for pod in sorted(pods) for n in pods[pod] if n not in planned][::3][:4]
    assert len(elsewhere) == 4
    # The admin moves it (as one might around a maintenance), then lets it go.
    slurm.update_job(job_id, ReqNodeList=",".join(elsewhere))
    slurm.run(["scontrol", "release", str(job_id)])
    assert wait_for_job(slurm, job_id) == "COMPLETED"
    out = (work / f"moved-{tag}-{job_id}.out").read_text()
    _ranks_match(out, admin_rankfile(site, job_id), set(elsewhere), 32, procid_is_rank=True)
    assert _bindings(site, job_id)[-1]["kind"] == "start"
    # The user sees where it ran and why.
    listing = _run_as(user, [str(site_venv() / "bin" / "arnold"), "jobs", "--json"], work)
    assert listing.returncode == 0, listing.stderr
    row = next(r for r in json.loads(listing.stdout) if r["slurm_job_id"] == job_id)
    assert row["status"] == "mapped at start" and set(row["nodes"]) == set(elsewhere)
    assert set(row["binding"]["previous"]) == planned


@pytest.fixture
def revive_nodes() -> Any:
    """Nodes whose slurmd a test killed are started and resumed afterwards."""
    killed: list[str] = []
    yield killed
    if killed:
        subprocess.run([sys.executable, str(REPO / "site_config" / "devcluster" /
                                            "devcluster.py"), "up"],
                       capture_output=True, text=True, timeout=300, check=False)
        for node in killed:
            subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"],
                           capture_output=True, text=True, check=False)


def test_a_requeued_job_that_lost_a_node_restarts_with_the_survivors_and_right_ranks(
        site: Any, slurm: Slurm, revive_nodes: list[str]) -> None:
    user = USERS[2]
    work = home(user)
    tag = uuid.uuid4().hex[:8]  # the output is appended to: never one an earlier job 42 left
    script = work / "requeue.sh"
    script.write_text("#!/bin/bash\n"
                      "echo \"start $SLURM_JOB_NODELIST ${SLURM_RESTART_COUNT:-0}\"\n"
                      f"srun --arnold-rankfile=auto bash -c '{REPORT}'\n"
                      "sleep 600\n")
    os.chown(script, *_ids(user))
    sbatch = str(site_venv() / "bin" / "arnold-sbatch")
    proc = _run_as(user, [sbatch, "--parsable", "--requeue", "-N", "4", "--ntasks-per-node=8",
                          "--gpus-per-node=8", "--exclusive", "-t", "15", "--open-mode=append",
                          "-o", str(work / f"requeue-{tag}-%j.out"), "--tp", "8", "--pp", "2",
                          str(script)], work)
    assert proc.returncode == 0, proc.stderr
    job_id = int(proc.stdout)
    try:
        first = _wait_for_start(slurm, job_id, work / f"requeue-{tag}-{job_id}.out", restarts=0)
        victim = sorted(first)[1]
        # The node dies: its slurmd is killed and it is set DOWN (it stays down: nothing
        # answers for it). Slurm requeues the job, which still requires the dead node.
        revive_nodes.append(victim)
        run_dir = Path(os.environ["SLURM_CONF"]).resolve().parent.parent
        pid = int((run_dir / f"slurmd-{victim}.pid").read_text().split()[0])
        os.kill(pid, signal.SIGKILL)
        slurm.run(["scontrol", "update", f"NodeName={victim}", "State=DOWN",
                   "Reason=arnold-test-dead-node"])
        deadline = time.monotonic() + 120
        info = slurm.job(job_id)
        while time.monotonic() < deadline and (info is None or info.state != "PENDING"):
            time.sleep(0.5)
            info = slurm.job(job_id)
        assert info is not None and info.state == "PENDING", \
            f"job {job_id} was not requeued within 120 s: {info}"
        assert victim in info.required_nodes
        # The admin loop's pass repairs it: the survivors and the nearest spare. A pass that
        # finds nothing to do yet (Slurm still finishing the requeue) is followed by the next,
        # as the loop's would be; each pass's log is kept for the failure message.
        passes = []
        deadline = time.monotonic() + 60
        while True:
            sync = subprocess.run([str(BIN / "arnold"), "-v", "reserve", "sync"],
                                  capture_output=True, text=True, timeout=120)
            assert sync.returncode == 0, sync.stderr
            passes.append(f"{sync.stdout}{sync.stderr}job: {slurm.job(job_id)}")
            if f"job {job_id}" in sync.stdout or time.monotonic() > deadline:
                break
            time.sleep(2)
        assert f"job {job_id}" in sync.stdout, "\n---\n".join(passes)
        second = _wait_for_start(slurm, job_id, work / f"requeue-{tag}-{job_id}.out", restarts=1)
        assert victim not in second
        assert set(first) - {victim} <= set(second)  # the survivors were kept
        out = (work / f"requeue-{tag}-{job_id}.out").read_text()
        after = out[out.index(f"start {_hl(second)} 1"):]
        _ranks_match(after, admin_rankfile(site, job_id), set(second), 32,
                     procid_is_rank=True)
    finally:
        slurm.cancel(job_id)
        wait_for_job(slurm, job_id)  # its nodes are free again for the next test


def _wait_for_start(slurm: Slurm, job_id: int, out: Path, *, restarts: int) -> list[str]:
    """The job's nodes once it runs its ``restarts``-th start and its tasks reported."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        info = slurm.job(job_id)
        text = out.read_text() if out.exists() else ""
        if info is not None and info.state == "RUNNING":
            marker = f"start {_hl(info.nodes)} {restarts}"
            if marker in text and text[text.index(marker):].count("\nR ") >= 32:
                return list(info.nodes)
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} did not start (restart {restarts}) within 90 s: "
                         f"{out.read_text() if out.exists() else 'no output'}")


def _hl(nodes: Any) -> str:
    import hostlist

    return str(hostlist.collect_hostlist(sorted(nodes)))


def _ids(user: str) -> tuple[int, int]:
    import pwd

    entry = pwd.getpwnam(user)
    return entry.pw_uid, entry.pw_gid


def test_bench_mapping_quick(site: Any, slurm: Slurm) -> None:
    proc = subprocess.run([str(BIN / "arnold"), "bench", "mapping", "--quick", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    summary = result["summary"]
    assert summary["allocations"] == 6 and summary["never_worse"]
    assert all(c["ours_dp"] <= c["slurm_dp"] and c["ours_pp"] <= c["slurm_pp"]
               for c in result["cases"])
    assert result["at_scale"]["nodes"] == 256
    assert result["live"]["mapped_wrote_rankfile"]
    assert result["live"]["mapped_median_s"] > 0 and result["live"]["nothing_asked_median_s"] > 0


def test_arnold_prolog_starts_without_the_solver_numpy_or_sqlite_utils_for_a_plain_job(
        slurm: Slurm) -> None:
    # slurmctld runs the prolog for every job that may want ranks; one that asks for nothing
    # must cost no more than reading its script (the shell wrapper answers most jobs sooner).
    job = slurm.submit(["--hold", "-N", "1", "--job-name", "arnold-plain", "--wrap", "true"])
    try:
        code = ("import os, sys; from site_config import load_config; "
                "from slurm_arnold.prolog import prolog; "
                "out = prolog(load_config(), os.environ); "
                "print(out.kind, sorted(m for m in ('numpy', 'sqlite_utils', 'pyscipopt', "
                "'lightgbm') if m in sys.modules))")
        env = {**os.environ, "SLURM_JOB_ID": str(job), "SLURM_JOB_UID": str(os.getuid()),
               "SLURM_JOB_NODELIST": tree_nodes(slurm)[0].name}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=env, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["none", "[]"], out.stdout + out.stderr
    finally:
        slurm.cancel(job)
