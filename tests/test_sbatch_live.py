"""arnold-sbatch end to end on the live cluster, with the SPANK plugin giving ranks."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from slurm_arnold.rankorder import parse
from slurm_arnold.slurm import Slurm
from tests.conftest import wait_for_job

pytestmark = pytest.mark.live
BIN = Path(sys.executable).parent
REPORT = ('echo "$SLURMD_NODENAME $SLURM_PROCID $SLURM_LOCALID $RANK $LOCAL_RANK $WORLD_SIZE '
          '$MASTER_ADDR $MASTER_PORT $ARNOLD_TP_RANK $ARNOLD_PP_RANK $ARNOLD_DP_RANK '
          '$ARNOLD_PLACEMENT_ID"')


def arnold_sbatch(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "arnold-sbatch"), *args], capture_output=True, text=True,
                          input=stdin, env=dict(os.environ))


def jobs_json() -> list[dict[str, Any]]:
    out = subprocess.run([str(BIN / "arnold"), "jobs", "--json", "--limit", "200"],
                         capture_output=True, text=True, check=True)
    return list(json.loads(out.stdout))


@pytest.fixture
def script(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "job.sh"
    path.write_text(f"""#!/bin/bash
#SBATCH -N 16 --ntasks-per-node=8 --gpus-per-node=8 --exclusive -t 5
#SBATCH -o {tmp_path}/out-%j.txt
#ARNOLD --tp 8 --pp 4 --alpha 0.25
srun --arnold-rankfile=auto bash -c '{REPORT}'
""")
    yield path


def _minipods(conf_dir: Path) -> dict[str, str]:
    from slurm_arnold.topology import read_topology_file

    topo = read_topology_file(str(conf_dir / "topology.conf"))
    return {n: topo.minipod_of(n) for n in topo.nodes}


def _check_ranks(out: Path, record: dict[str, Any], pods: dict[str, str]) -> None:
    lines = [ln.split() for ln in out.read_text().splitlines() if ln.strip()]
    assert len(lines) == 128
    ranks = sorted(int(f[3]) for f in lines)
    assert ranks == list(range(128))
    placement_nodes: set[str] = set(record["nodes"])
    header, entries = parse(Path(str(record["rankfile"])).read_text())
    planned = {(e.node, e.local_rank): e for e in entries}
    dp_groups: dict[int, set[str]] = {}
    pp_groups: dict[int, set[str]] = {}
    for node, procid, localid, rank, local, world, maddr, mport, tp, pp, dp, pid in lines:
        assert int(rank) == int(tp) + 8 * (int(dp) + 4 * int(pp))
        assert int(world) == 128 and local == localid
        assert int(procid) == int(rank)  # SLURM_HOSTFILE puts plain srun in the same order
        assert (maddr, mport, pid) == (header["master_addr"], header["master_port"],
                                       header["placement_id"])
        e = planned[(node, int(local))]
        assert (e.rank, e.tp, e.pp, e.dp) == (int(rank), int(tp), int(pp), int(dp))
        dp_groups.setdefault(int(pp), set()).add(node)
        pp_groups.setdefault(int(dp), set()).add(node)
    assert set().union(*dp_groups.values()) == placement_nodes
    metrics = record["metrics"]
    assert isinstance(metrics, dict)
    assert max(len({pods[n] for n in g}) for g in dp_groups.values()) == metrics["max_dp_spread"]
    assert max(len({pods[n] for n in g}) for g in pp_groups.values()) == metrics["max_pp_spread"]


def test_every_task_gets_its_planned_rank(slurm: Slurm, script: Path,
                                          slurm_conf_dir: Path) -> None:
    proc = arnold_sbatch("--parsable", str(script))
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(r"\d+\n", proc.stdout)
    job_id = int(proc.stdout)
    assert wait_for_job(slurm, job_id) == "COMPLETED"
    record = next(r for r in jobs_json() if r["slurm_job_id"] == job_id)
    assert record["placement"] == "mip"
    allocated = {j.job_id: j for j in slurm.jobs()}[job_id].nodes
    assert set(allocated) == set(record["nodes"])
    _check_ranks(script.parent / f"out-{job_id}.txt", record, _minipods(slurm_conf_dir))
    # The pipeline scheduler reads the same placement (and the live topology).
    sched = subprocess.run([str(BIN / "arnold"), "-v", "pipeline", "--from-job", str(job_id),
                            "--microbatches", "8", "--tf", "0.01", "--tb", "0.01", "--tw",
                            "0.01", "--message-bytes", "64M", "--schedule", "1f1b", "--json"],
                           capture_output=True, text=True, timeout=60)
    assert sched.returncode == 0, sched.stderr
    assert len(json.loads(sched.stdout)["order"]) == record["pp"]
    crossing = record["metrics"]["max_pp_spread"] > 1
    assert ("cross-minipod boundaries none" in sched.stderr) != crossing, sched.stderr


def test_placement_slurm_runs_and_is_recorded(slurm: Slurm, script: Path,
                                              slurm_conf_dir: Path) -> None:
    proc = arnold_sbatch("--parsable", "--placement=slurm", str(script))
    assert proc.returncode == 0, proc.stderr
    job_id = int(proc.stdout)
    assert wait_for_job(slurm, job_id) == "COMPLETED"
    record = next(r for r in jobs_json() if r["slurm_job_id"] == job_id)
    assert record["placement"] == "slurm"
    assert record["metrics"]["max_dp_spread"] >= 1
    _check_ranks(script.parent / f"out-{job_id}.txt", record, _minipods(slurm_conf_dir))


def test_plain_job_is_handed_to_sbatch_unchanged(slurm: Slurm, tmp_path: Path) -> None:
    ours = arnold_sbatch("-o", "/dev/null", "--wrap", "true")
    theirs = subprocess.run(["sbatch", "-o", "/dev/null", "--wrap", "true"], capture_output=True,
                            text=True)
    assert ours.returncode == theirs.returncode == 0
    assert re.sub(r"\d+", "N", ours.stdout) == re.sub(r"\d+", "N", theirs.stdout)
    assert ours.stdout.startswith("Submitted batch job ")
    bad_ours = arnold_sbatch("--no-such-option", "--wrap", "true")
    bad_theirs = subprocess.run(["sbatch", "--no-such-option", "--wrap", "true"],
                                capture_output=True, text=True)
    assert bad_ours.returncode == bad_theirs.returncode != 0
    assert bad_ours.stdout == bad_theirs.stdout == ""
    # a script on stdin works too
    piped = arnold_sbatch("--parsable", "-o", "/dev/null", stdin="#!/bin/sh\ntrue\n")
    assert piped.returncode == 0 and re.fullmatch(r"\d+\n", piped.stdout)


def _newest_job_id(slurm: Slurm) -> int:
    """The highest job id slurmctld still lists; ids only grow, so no id above an earlier
    answer means no job was submitted. Counting jobs would not do: finished jobs leave its
    memory after MinJobAge, so the count can fall while a job is submitted."""
    return max((job.job_id for job in slurm.jobs()), default=0)


def test_a_job_that_can_never_run_is_refused_in_one_line(slurm: Slurm) -> None:
    newest = _newest_job_id(slurm)
    proc = arnold_sbatch("--tp", "8", "--pp", "4", "-N", "96", "--wrap", "true")
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr == ("arnold-sbatch: error: 96 nodes needed but partition gpu has only "
                           "64 in service; ask for at most 64\n")
    assert _newest_job_id(slurm) <= newest


def test_concurrent_submissions_never_share_nodes(slurm: Slurm, tmp_path: Path) -> None:
    """20 arnold-sbatch calls at once for 8 nodes each on 64 nodes, beside one call that
    --waits: each ends with a job id (started, or queued for the nodes that drain first), no
    node is given twice to jobs that start, none waits for the --wait, and the state database
    is consistent afterwards."""
    from site_config import load_config

    waiter = subprocess.Popen([str(BIN / "arnold-sbatch"), "--parsable", "--wait", "--tp", "8",
                               "--pp", "2", "-N", "2", "--exclusive", "-t", "2", "-o",
                               "/dev/null", "--wrap", "sleep 90"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    assert waiter.stdout is not None
    waiting_id = int(waiter.stdout.readline())  # sbatch printed it; --wait goes on

    def one(_: int) -> tuple[float, subprocess.CompletedProcess[str]]:
        t0 = time.monotonic()
        proc = arnold_sbatch("--parsable", "--tp", "8", "--pp", "2", "-N", "8", "--exclusive",
                             "-t", "2", "-o", "/dev/null", "--wrap", "sleep 20")
        return time.monotonic() - t0, proc

    with ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(one, range(20)))
    assert waiter.poll() is None  # still waiting for its job, and it blocked no one
    every = []
    for seconds, r in results:
        assert seconds < 60, r.stderr
        assert r.returncode == 0 and r.stdout.strip().isdigit(), r.stderr  # never refused
        every.append(int(r.stdout))
    records = {r["slurm_job_id"]: r for r in jobs_json()}
    ids = [i for i in every if records[i]["status"] == "submitted"]
    assert 1 <= len(ids) <= 7  # 62 nodes were free: at most 7 jobs of 8 start at once
    assert all(records[i]["status"] == "queued" for i in every if i not in ids)
    seen: set[str] = set(records[waiting_id]["nodes"])
    for job_id in ids:
        nodes = set(records[job_id]["nodes"])
        assert not nodes & seen
        seen |= nodes
    db = sqlite3.connect(load_config().users_dir / "root" / "arnold.db")
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert db.execute("select count(*) from jobs where status = 'submitting'").fetchone() == (0,)
    for job_id in [*every, waiting_id]:
        slurm.cancel(job_id)
    waiter.wait(timeout=60)


def test_malformed_rank_file_fails_the_task(slurm: Slurm, tmp_path: Path) -> None:
    bad = tmp_path / "bad.rankorder"
    bad.write_text("arnold-rankorder v1\nworld_size two\n")
    bad.chmod(0o644)
    err = tmp_path / "err.txt"
    proc = subprocess.run(["sbatch", "--parsable", "-N", "1", "-e", str(err), "-o", "/dev/null",
                           "--wrap", f"srun --arnold-rankfile={bad} true"], capture_output=True,
                          text=True)
    job_id = int(proc.stdout)
    assert wait_for_job(slurm, job_id) == "FAILED"
    assert f"arnold: {bad}: line 2: bad world_size" in err.read_text()


def test_a_rank_file_the_user_cannot_read_is_refused(slurm: Slurm, tmp_path: Path) -> None:
    """The plugin reads the file with the job user's rights: a root-only file given to a job
    of `nobody` fails its task instead of leaking root's file into the job's ranks."""
    import pwd
    import shutil
    import tempfile

    private = Path(tempfile.mkdtemp(prefix="arnold-private-"))
    secret = private / "root-only.rankorder"
    secret.write_text("arnold-rankorder v1\n")
    secret.chmod(0o600)
    private.chmod(0o755)
    out = Path(tempfile.mkdtemp(prefix="arnold-nobody-out-"))
    out.chmod(0o777)
    nobody = pwd.getpwnam("nobody")
    proc = subprocess.run(["sbatch", "--parsable", f"--uid={nobody.pw_uid}",
                           f"--gid={nobody.pw_gid}", "-N", "1", "-D", str(out),
                           "-e", str(out / "err.txt"), "-o", "/dev/null", "--wrap",
                           f"srun --arnold-rankfile={secret} true"], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    job_id = int(proc.stdout)
    try:
        assert wait_for_job(slurm, job_id) == "FAILED"
        assert f"arnold: {secret}: cannot open: Permission denied" in (
            out / "err.txt").read_text()
    finally:
        shutil.rmtree(private, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)



def test_bench_sbatch_quick(slurm: Slurm) -> None:
    many = os.geteuid() == 0  # the multi-user row makes Unix users
    out = subprocess.run([str(BIN / "arnold"), "bench", "sbatch", "--quick", "--json",
                          "--multi-user" if many else "--no-multi-user"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["runs"] == 2 and doc["sbatch_median_s"] > 0
    assert abs(doc["overhead_median_s"] - (doc["arnold_sbatch_median_s"]
                                           - doc["sbatch_median_s"])) <= 0.002
    # Every backend the lane's site install serves, side by side (25.11's has pyslurm).
    expected = ["pyslurm", "commands"] if slurm.version() == (25, 11) else ["commands"]
    assert list(doc["backends"]) == expected and doc["backend"] == expected[0]
    for b in doc["backends"].values():
        # The lock is taken after start-up and let go once sbatch printed the job id.
        assert 0 < b["lock_median_s"] <= b["lock_p95_s"] < b["arnold_sbatch_median_s"] + 0.001
    assert ("lock_ratio" in doc) == (len(expected) == 2)
    if many:
        for m in (doc["multi_user"], *(b["multi_user"] for b in doc["backends"].values())):
            assert (m["users"], m["per_user"], m["submitted"], m["failed"]) == (2, 2, 4, 0)
            assert m["shared_node_pairs"] == [] and 0 < m["p50_s"] <= m["p95_s"] <= m["max_s"]


def test_model_plans_the_layout_when_tp_and_pp_are_not_given(slurm: Slurm,
                                                             tmp_path: Path) -> None:
    out = tmp_path / "plan-%j.out"
    proc = arnold_sbatch("--parsable", "-N", "4", "--gpus-per-node=8", "--exclusive", "-t", "2",
                         "-o", str(out), "--model", "gpt-1.7b", "--global-batch", "64",
                         "--gpu-type", "a100-80g", "--wrap", "env | grep ^ARNOLD_PLAN_ | sort")
    assert proc.returncode == 0, proc.stderr
    job_id = int(proc.stdout)
    assert "--model gpt-1.7b: planned TP" in proc.stderr
    record = next(r for r in jobs_json() if r["slurm_job_id"] == job_id)
    planned = json.loads(subprocess.run(
        [str(BIN / "arnold"), "plan", "--model", "gpt-1.7b", "--gpus", "32", "--global-batch",
         "64", "--gpu", "a100-80g", "--json"], capture_output=True, text=True,
        check=True).stdout)
    assert (record["tp"], record["pp"]) == (planned["tp"], planned["pp"])
    assert wait_for_job(slurm, job_id) == "COMPLETED"
    text = Path(str(out).replace("%j", str(job_id))).read_text()
    assert f"ARNOLD_PLAN_MICRO_BATCH={planned['micro_batch']}" in text
    assert f"ARNOLD_PLAN_RECOMPUTE={planned['recompute']}" in text
    sizes = ",".join(str(b - a + 1) for a, b in planned["stages"])
    assert f"ARNOLD_PLAN_STAGES={sizes}" in text and f"ARNOLD_PLAN_CP={planned['cp']}" in text
    missing = arnold_sbatch("-N", "4", "--model", "gpt-1.7b", "--wrap", "true")
    assert missing.returncode == 1
    assert "--model needs -N (nodes) and --global-batch" in missing.stderr


def test_context_and_expert_parallel_ranks_from_the_plugin(slurm: Slurm,
                                                           tmp_path: Path) -> None:
    # TP 4 x CP 2 as the NVLink group (one 8-GPU node), EP 2 over DP 2, PP 2: 32 ranks.
    path = tmp_path / "cp.sh"
    path.write_text(f"""#!/bin/bash
#SBATCH -N 4 --ntasks-per-node=8 --gpus-per-node=8 --exclusive -t 5
#SBATCH -o {tmp_path}/out-%j.txt
#ARNOLD --tp 4 --cp 2 --ep 2 --pp 2 --nvlink-group tp-cp
srun --arnold-rankfile=auto bash -c 'echo "$SLURMD_NODENAME $RANK $ARNOLD_TP_RANK \
$ARNOLD_CP_RANK $ARNOLD_DP_RANK $ARNOLD_PP_RANK $ARNOLD_EP_RANK"'
""")
    proc = arnold_sbatch("--parsable", str(path))
    assert proc.returncode == 0, proc.stderr
    job_id = int(proc.stdout)
    assert wait_for_job(slurm, job_id) == "COMPLETED"
    record = next(r for r in jobs_json() if r["slurm_job_id"] == job_id)
    header, _ = parse(Path(str(record["rankfile"])).read_text())
    assert (header["tp"], header["cp"], header["ep"], header["dp"]) == ("4", "2", "2", "2")
    lines = [ln.split() for ln in (tmp_path / f"out-{job_id}.txt").read_text().splitlines()
             if ln.strip()]
    assert sorted(int(f[1]) for f in lines) == list(range(32))
    groups: dict[tuple[int, int], set[str]] = {}
    for node, *numbers in lines:
        rank, tp, cp, dp, pp, ep = map(int, numbers)
        assert rank == tp + 4 * (cp + 2 * (dp + 2 * pp))  # Megatron-Core's tp-cp-ep-dp-pp
        assert ep == dp % 2
        groups.setdefault((pp, dp), set()).add(node)
    assert len(groups) == 4 and all(len(nodes) == 1 for nodes in groups.values())


def test_tier_weights_reach_the_placement_and_the_jobs_spec(slurm: Slurm,
                                                             tmp_path: Path) -> None:
    """--tier-weight is weighed where the job is placed and kept in its spec, so a rebinding
    at job start weighs the same; a tier the cluster lacks is refused before anything runs."""
    from site_config import load_config
    from slurm_arnold.site_state import caller
    from slurm_arnold.submit.spec import read_spec

    newest = _newest_job_id(slurm)
    bad = arnold_sbatch("--tp", "8", "--pp", "2", "-N", "4", "--tier-weight", "rack=1",
                        "--wrap", "true")
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr.startswith("arnold-sbatch: error: --tier-weight: no tier named 'rack'")
    assert bad.stderr.count("\n") == 1 and "'leaf'" in bad.stderr
    assert _newest_job_id(slurm) <= newest
    proc = arnold_sbatch("--parsable", "--tp", "8", "--pp", "2", "-N", "4",
                         "--tier-weight", "leaf=2", "-t", "5", "--exclusive",
                         "--gpus-per-node=8", "-o", str(tmp_path / "out-%j.txt"),
                         "--wrap", "true")
    assert proc.returncode == 0, proc.stderr
    job_id = int(proc.stdout)
    assert wait_for_job(slurm, job_id) == "COMPLETED"
    spec = read_spec(load_config(), caller(), os.getuid(), job_id)
    assert spec is not None and spec.tier_weights == {"leaf": [2.0]}
