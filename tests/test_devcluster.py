"""``make cluster`` is idempotent: a second start reuses the running daemons, and on a running
cluster restarts only those that died, without disturbing the jobs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_arnold.slurm import Slurm

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "site_config" / "devcluster" / "devcluster.py"
#: The lane the tests run on (``source devcluster-26.05.env`` sets it); 22.05 otherwise.
LANE = os.environ.get("ARNOLD_DEV_SLURM", "22.05")
SUFFIX = "" if LANE == "22.05" else f"-{LANE}"
RUN = REPO / f".devcluster{SUFFIX}"


@pytest.mark.live
def test_second_up_restarts_nothing(slurm: Slurm) -> None:
    if not (RUN / "slurmctld.pid").exists():
        pytest.skip("the running cluster was not started from this checkout")
    before = {p.name: p.read_text() for p in RUN.glob("*.pid")}
    proc = subprocess.run([sys.executable, str(SCRIPT), "up"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    after = {p.name: p.read_text() for p in RUN.glob("*.pid")}
    assert before == after
    env = (REPO / f"devcluster{SUFFIX}.env").read_text().splitlines()
    run = RUN.resolve()
    assert env[0] == f"export SLURM_CONF={run / 'etc' / 'slurm.conf'}"
    assert f"export PATH=$PATH:{run / 'venv' / 'bin'}" in env[1]  # the site install, last
    assert all(n.state == "IDLE" or n.gpus_used > 0 for n in slurm.nodes())
    assert slurm.version() == tuple(int(x) for x in LANE.split("."))


def _mtime(path: Path) -> float:
    # Slurm saves by unlinking the file and linking the new one in its place (state_save.c):
    # between the two it is missing, which is not yet saved.
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


@pytest.mark.live
def test_up_restarts_a_killed_slurmctld_and_slurmd_and_running_jobs_keep_running(
        slurm: Slurm, tmp_path: Path) -> None:
    import signal
    import time

    if not (RUN / "slurmctld.pid").exists():
        pytest.skip("the running cluster was not started from this checkout")
    out = tmp_path / "job.out"
    tmp_path.chmod(0o777)
    job = subprocess.run(["sbatch", "--parsable", "-N", "2", "--exclusive", "-t", "5", "-J",
                          "arnold-restart", "-o", str(out), "--wrap", "echo started; sleep 240"],
                         capture_output=True, text=True, check=True)
    job_id = int(job.stdout.strip().split(";")[0])
    marker_id = ""
    try:
        # Running in its script, not only RUNNING in slurmctld's books: a batch job whose
        # launch a dying slurmctld never finished is killed by the next one, by design.
        deadline = time.monotonic() + 30
        while "started" not in (out.read_text() if out.exists() else ""):
            assert time.monotonic() < deadline, "the job did not start"
            time.sleep(0.3)
        info = next(j for j in slurm.jobs() if j.job_id == job_id)
        # ... and in slurmctld's saved state: what a SIGKILL loses is what was not saved yet
        # (a restarted slurmctld would find the job pending, and kill it as never launched).
        # A change made now (a held job) is saved with everything before it.
        state = Path(_conf_value("StateSaveLocation")) / "job_state"
        mark = time.time()
        marker = subprocess.run(["sbatch", "--parsable", "--hold", "-t", "1", "-o", "/dev/null",
                                 "--wrap", "true"], capture_output=True, text=True, check=True)
        marker_id = marker.stdout.strip().split(";")[0]
        while _mtime(state) <= mark:
            assert time.monotonic() < deadline + 30, "slurmctld did not save its state"
            time.sleep(0.2)
        idle = sorted(n.name for n in slurm.nodes() if n.state == "IDLE"
                      and n.name.startswith("n"))[-1]
        for pidfile in (RUN / "slurmctld.pid", RUN / f"slurmd-{idle}.pid"):
            os.kill(int(pidfile.read_text().split()[0]), signal.SIGKILL)
        time.sleep(1)
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, str(SCRIPT), "up"], capture_output=True,
                              text=True, timeout=120)
        took = time.monotonic() - t0
        assert proc.returncode == 0, proc.stderr
        assert took <= 60, f"make cluster took {took:.0f} s after a slurmctld died"
        assert "restarted slurmctld, 1 slurmd" in proc.stderr
        after = next(j for j in slurm.jobs() if j.job_id == job_id)
        assert after.state == "RUNNING" and after.nodes == info.nodes
        # Slurm's state was kept: the job is the same job, started when it was.
        assert after.start_time == info.start_time
        assert next(n for n in slurm.nodes() if n.name == idle).state == "IDLE"
    finally:
        # After the restart: cancelled before it, the marker could come back with the state
        # saved before the cancel.
        ours = {job_id, *([int(marker_id)] if marker_id else [])}
        subprocess.run(["scancel", *map(str, ours)], check=False)
        # Gone before the next test, which may count every job left in the queue.
        until = time.monotonic() + 60
        while any(j.job_id in ours for j in slurm.jobs(unfinished=True)) \
                and time.monotonic() < until:
            time.sleep(0.3)


def _conf_value(key: str) -> str:
    for line in Path(os.environ["SLURM_CONF"]).read_text().splitlines():
        name, _, value = line.partition("=")
        if name.strip().lower() == key.lower():
            return value.strip()
    raise AssertionError(f"{key} is not in slurm.conf")


def test_the_built_lane_says_where_to_put_slurms_source(tmp_path: Path) -> None:
    # No tarball and no build: one line naming the directory to put SchedMD's tarball in.
    env = {**os.environ, "ARNOLD_DEV_SLURM_SOURCES": str(tmp_path / "vendor"),
           "ARNOLD_DEV_SLURM_BUILD": str(tmp_path / "slurm-25.11")}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--slurm", "25.11", "root"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert "slurm-25.11.N.tar.xz" in lines[0] and str(tmp_path / "vendor") in lines[0]
    assert not (tmp_path / "slurm-25.11").exists()


def test_a_cluster_larger_than_a_lanes_ports_is_one_line() -> None:
    # 16 x 16 x 16 = 4,096 nodes: their slurmds would reach into the next lane's ports.
    env = {**os.environ, "ARNOLD_DEV_MINIPODS": "16", "ARNOLD_DEV_LEAVES": "16",
           "ARNOLD_DEV_NODES": "16"}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--slurm", "22.05", "up"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "4096 nodes" in proc.stderr
    assert "2999 a lane's ports hold" in proc.stderr


def test_a_restart_keeps_the_running_clusters_size_unless_told(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Not live: the module's own rule. (A 2,048-node cluster brought back by a bench fault's
    # `make cluster` with no variables set once came back with the default 64 nodes.)
    import importlib.util

    spec = importlib.util.spec_from_file_location("devcluster_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look it up there
    spec.loader.exec_module(module)
    for name in ("MINIPODS", "LEAVES", "NODES", "GPUS", "PORT_BASE"):
        monkeypatch.delenv(f"ARNOLD_DEV_{name}", raising=False)
    running = module.Shape(8, 8, 32, 8, module.LANE.port_base)
    assert module.Shape.from_env(running) == running
    assert module.Shape.from_env(None).node_count == 64
    monkeypatch.setenv("ARNOLD_DEV_NODES", "4")
    assert module.Shape.from_env(running).node_count == 256
