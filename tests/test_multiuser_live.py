"""Many users on one cluster, live: real Unix users (``useradd``) run the site install's
commands (a venv of Debian's ``/usr/bin/python3``, made by ``make cluster``) through
``setpriv`` with only HOME, PATH and SLURM_CONF set; every other setting comes from the
``arnold.toml`` beside SLURM_CONF.

Root is needed to make the users; the tests skip with a message without it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import sqlite3
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks import multiuser
from benchmarks.multiuser import USERS, as_user, home, run_at_once
from site_config import SiteConfig
from slurm_arnold.rankorder import parse
from slurm_arnold.site_state import SUBMIT_LOCK
from slurm_arnold.slurm import Slurm
from tests.conftest import tree_nodes, wait_for_job

pytestmark = pytest.mark.live

RANK_SCRIPT = """#!/bin/bash
srun --arnold-rankfile=auto bash -c 'echo "RANKS $SLURMD_NODENAME $SLURM_LOCALID $RANK \
$LOCAL_RANK $ARNOLD_TP_RANK $ARNOLD_PP_RANK $ARNOLD_DP_RANK $WORLD_SIZE"'
sleep {sleep}
"""
SHAPE = ["-N", "4", "--ntasks-per-node=8", "--gpus-per-node=8", "--exclusive", "-t", "3",
         "--tp", "8", "--pp", "2"]


@pytest.fixture(autouse=True)
def no_leftovers(slurm: Slurm) -> Iterator[None]:
    """Every test starts and ends with none of the test users' jobs."""
    _cancel_users(slurm)
    yield
    _cancel_users(slurm)


def _cancel_users(slurm: Slurm) -> None:
    for user in USERS:
        subprocess.run(["scancel", "-u", user], capture_output=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not [j for j in slurm.jobs() if j.user in USERS and j.state not in
                ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL")]:
            return
        time.sleep(0.3)


def _bin(name: str) -> str:
    return str(multiuser.site_venv() / "bin" / name)


def _free_count(slurm: Slurm) -> int:
    return sum(1 for n in tree_nodes(slurm) if n.state == "IDLE" and not n.flags)


def _wait_free(slurm: Slurm, count: int, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while _free_count(slurm) < count:
        assert time.monotonic() < deadline, f"fewer than {count} idle nodes after {timeout} s"
        time.sleep(0.5)


def _script(user: str, sleep: int) -> Path:
    path = home(user) / "ranks.sh"
    path.write_text(RANK_SCRIPT.format(sleep=sleep))
    os.chmod(path, 0o644)
    return path


def _submit_argv(user: str, *extra: str, sleep: int = 20) -> list[str]:
    return [_bin("arnold-sbatch"), "--parsable", "-o", str(home(user) / "ranks-%j.out"),
            *SHAPE, *extra, str(_script(user, sleep))]


def _record(site: SiteConfig, user: str, job_id: int) -> dict[str, object]:
    db = sqlite3.connect(site.users_dir / user / "arnold.db")
    db.row_factory = sqlite3.Row
    row = db.execute("SELECT * FROM jobs WHERE slurm_job_id = ?", [job_id]).fetchone()
    db.close()
    assert row is not None, f"no record of job {job_id} in {user}'s database"
    return dict(row)


def _check_ranks(site: SiteConfig, user: str, job_id: int) -> None:
    """Every task's RANK, LOCAL_RANK and TP/PP/DP ranks are its rank file's entry."""
    header, entries = parse(Path(str(_record(site, user, job_id)["rankfile"])).read_text())
    want = {(e.node, e.local_rank): e for e in entries}
    out = home(user) / f"ranks-{job_id}.out"
    lines = [line.split()[1:] for line in out.read_text().splitlines()
             if line.startswith("RANKS ")]
    assert len(lines) == len(want) == int(header["world_size"]), out.read_text()[-500:]
    for node, local_id, rank, local_rank, tp, pp, dp, world in lines:
        e = want[(node, int(local_id))]
        assert (int(rank), int(local_rank), int(tp), int(pp), int(dp), int(world)) == \
            (e.rank, e.local_rank, e.tp, e.pp, e.dp, int(header["world_size"]))


def _integrity(path: Path) -> str:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return str(db.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        db.close()


def _wait_running(slurm: Slurm, ids: list[int], timeout: float = 20.0) -> dict[int, set[str]]:
    """Each job's allocated nodes once every one of them has started."""
    deadline = time.monotonic() + timeout
    while True:
        jobs = {j.job_id: j for j in slurm.jobs() if j.job_id in ids}
        if all(jobs[i].state in ("RUNNING", "COMPLETING", "COMPLETED") for i in ids):
            return {i: set(jobs[i].nodes) for i in ids}
        if time.monotonic() > deadline:
            waiting = {i: (jobs[i].state, jobs[i].reason) for i in ids
                       if jobs[i].state == "PENDING"}
            raise AssertionError(f"jobs still waiting {timeout} s after submission: {waiting}")
        time.sleep(0.2)


def _assert_disjoint(nodes: dict[int, set[str]]) -> None:
    ids = sorted(nodes)
    for k, a in enumerate(ids):
        for b in ids[k + 1:]:
            assert not nodes[a] & nodes[b], f"jobs {a} and {b} share {nodes[a] & nodes[b]}"


def test_fifteen_submissions_at_once_get_disjoint_nodes_and_start_at_once(
        slurm: Slurm, site: SiteConfig) -> None:
    _wait_free(slurm, 60)
    results = run_at_once([(u, as_user(u, _submit_argv(u))) for u in USERS for _ in range(5)])
    for r in results:
        assert r.returncode == 0 and r.job_id is not None, (r.user, r.stderr)
        assert r.stdout == f"{r.job_id}\n"  # --parsable: the id alone, as sbatch prints it
    ids = [r.job_id for r in results if r.job_id is not None]
    # Each job sleeps 20 s: had two been given the same nodes, one would still be waiting.
    _assert_disjoint(_wait_running(slurm, ids))
    for r in results:
        assert r.job_id is not None
        assert wait_for_job(slurm, r.job_id, timeout=120) == "COMPLETED"
        _check_ranks(site, r.user, r.job_id)
    for user in USERS:
        assert _integrity(site.users_dir / user / "arnold.db") == "ok"
    assert _integrity(site.db_path) == "ok"
    # jobs_dir is shared between hosts: no database there may use WAL (docs/site.md).
    shared = [p.name for p in site.users_dir.rglob("*") if p.name.endswith(("-wal", "-shm"))]
    assert not shared, shared


def test_fewer_free_nodes_than_asked_no_job_waits_on_another_jobs_nodes(
        slurm: Slurm, site: SiteConfig) -> None:
    _wait_free(slurm, 64)
    blocker = subprocess.run(
        as_user(USERS[0], ["sbatch", "--parsable", "-N", "24", "--exclusive", "-t", "3",
                           "-o", "/dev/null", "--wrap", "sleep 150"]),
        capture_output=True, text=True, check=True)
    blocker_id = int(blocker.stdout.strip())
    _wait_running(slurm, [blocker_id])
    free = _free_count(slurm)
    results = run_at_once([(u, as_user(u, _submit_argv(u, sleep=20))) for u in USERS
                           for _ in range(5)])
    for r in results:  # busy nodes are no reason to refuse: the rest are queued
        assert r.returncode == 0 and r.job_id is not None, r.stderr
    ids = [r.job_id for r in results if r.job_id is not None]
    deadline = time.monotonic() + 20
    while True:
        jobs = {j.job_id: j for j in slurm.jobs() if j.job_id in ids}
        started = [i for i in ids if jobs[i].state in ("RUNNING", "COMPLETING", "COMPLETED")]
        if len(started) >= free // 4 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert len(started) == free // 4
    queued = [i for i in ids if i not in started]
    blocker_nodes = set({j.job_id: j for j in slurm.jobs()}[blocker_id].nodes)
    running = {i: set(jobs[i].nodes) for i in started}
    _assert_disjoint(running | {blocker_id: blocker_nodes})
    # The queued ones wait for the blocker's nodes (the ones that drain first), each for
    # its own, never for nodes another started job was given.
    waiting = {i: set(jobs[i].required_nodes) for i in queued}
    for i, nodes in waiting.items():
        assert jobs[i].state == "PENDING" and nodes <= blocker_nodes, (i, nodes)
    _assert_disjoint(waiting)
    slurm.cancel(blocker_id)


def _fingerprint(slurm: Slurm, site: SiteConfig, job_id: int) -> tuple[object, ...]:
    job = {j.job_id: j for j in slurm.jobs()}[job_id]
    res = {r.name: r for r in slurm.reservations()}.get(f"arnold_{job_id}")
    files = sorted((site.users_dir / USERS[0]).rglob("*"))
    digest = hashlib.sha256()
    for f in files:
        if f.is_file() and not f.name.endswith(("-wal", "-shm")):
            digest.update(f.name.encode() + f.read_bytes())
    site_rows = sqlite3.connect(f"file:{site.db_path}?mode=ro", uri=True).execute(
        "SELECT (SELECT count(*) FROM reservations), (SELECT count(*) FROM admissions), "
        "(SELECT count(*) FROM history)").fetchone()
    return (job.state, job.reason, job.required_nodes, job.reservation,
            res.nodes if res else None, res.users if res else None, digest.hexdigest(),
            tuple(site_rows))


def test_a_user_cannot_touch_another_users_job_placement_or_reservation(
        slurm: Slurm, site: SiteConfig, tmp_path: Path) -> None:
    owner, other = USERS[0], USERS[1]
    _wait_free(slurm, 8)
    proc = subprocess.run(as_user(owner, _submit_argv(owner, "--hold")), capture_output=True,
                          text=True, check=True, cwd="/")
    job_id = int(proc.stdout.strip())
    record = _record(site, owner, job_id)
    rankfile = Path(str(record["rankfile"]))
    job = {j.job_id: j for j in slurm.jobs()}[job_id]
    name = f"arnold_{job_id}"
    subprocess.run(["scontrol", "create", "reservation", f"ReservationName={name}",
                    f"Nodes={','.join(job.required_nodes)}", f"Users={owner}",
                    "StartTime=now", "Duration=10", "Flags=IGNORE_JOBS"],
                   check=True, capture_output=True)
    swf = home(other) / "log.swf"
    swf.write_text("1 0 10 100 1 -1 -1 1 3600 -1 1 1 1 1 1 1 -1 -1\n")
    os.chmod(swf, 0o644)
    try:
        before = _fingerprint(slurm, site, job_id)
        arnold = _bin("arnold")
        attempts = [
            [arnold, "reserve", "create", str(job_id)],
            [arnold, "reserve", "release", name],
            [arnold, "reserve", "release", str(job_id)],
            [arnold, "reserve", "sync"],
            [arnold, "reserve", "plan", str(job_id)],
            [arnold, "predictor", "predict", "--job", str(job_id)],
            [arnold, "predictor", "import", "swf", str(swf)],
            [arnold, "predictor", "retrain", "--no-import"],
            [arnold, "pipeline", "--from-job", str(job_id), "--microbatches", "4"],
            [arnold, "site", "init"],
        ]
        for argv in attempts:
            p = subprocess.run(as_user(other, argv), capture_output=True, text=True, cwd="/")
            assert p.returncode == 1, (argv, p.returncode, p.stderr)
            lines = p.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("arnold: error: "), (argv, p.stderr)
            assert "Traceback" not in p.stderr
        # The files themselves: the owner's directory and rank file are not the other's to change.
        for argv in (["cp", "/dev/null", str(rankfile)],
                     ["touch", str(rankfile.parent / "planted.rankorder")],
                     ["mv", str(site.users_dir / owner), str(site.users_dir / "stolen")]):
            p = subprocess.run(as_user(other, argv), capture_output=True, text=True)
            assert p.returncode != 0, argv
        assert _fingerprint(slurm, site, job_id) == before
        # Reading stays open to everyone, and shows each their own records only.
        p = subprocess.run(as_user(other, [arnold, "reserve", "list", "--json"]),
                           capture_output=True, text=True, cwd="/")
        assert p.returncode == 0, p.stderr
        assert name in {r["name"] for r in json.loads(p.stdout)}
        p = subprocess.run(as_user(other, [arnold, "jobs", "--json"]), capture_output=True,
                           text=True, cwd="/")
        assert p.returncode == 0, p.stderr
        assert job_id not in {r["slurm_job_id"] for r in json.loads(p.stdout)}
        # Nor can the other user's job take the owner's ranks: the plugin refuses the file.
        p = subprocess.run(
            as_user(other, ["srun", "-N", "1", "-t", "1", f"--arnold-rankfile={rankfile}",
                            "true"]), capture_output=True, text=True, timeout=120)
        assert p.returncode != 0
        assert f"arnold: {rankfile}: belongs to another user; not trusted" in p.stderr, p.stderr
    finally:
        subprocess.run(["scontrol", "delete", f"ReservationName={name}"], capture_output=True)


def _lock_holder(lock: Path) -> int | None:
    """The pid holding an flock on ``lock`` (from /proc/locks), if any."""
    inode = lock.stat().st_ino
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5].endswith(f":{inode}"):
            return int(fields[4])
    return None


def test_a_submission_killed_while_holding_the_site_lock_blocks_nobody(
        slurm: Slurm, site: SiteConfig) -> None:
    _wait_free(slurm, 8)
    lock = site.state_dir / SUBMIT_LOCK
    killed = None
    for _ in range(20):  # the hold lasts a fraction of a second: catch it in the act
        proc = subprocess.Popen(as_user(USERS[0], _submit_argv(USERS[0], "--hold")),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            pid = _lock_holder(lock)
            if pid is not None:
                os.kill(pid, signal.SIGSTOP)
                if _lock_holder(lock) == pid:
                    os.kill(pid, signal.SIGKILL)
                    killed = pid
                os.kill(pid, signal.SIGCONT)  # let a dead or lucky process finish
                break
        proc.kill()
        proc.communicate(timeout=60)
        if killed is not None:
            break
        _cancel_users(slurm)
    assert killed is not None, "never caught a submission holding the lock"
    # No orphaned claim: the next user may have every node no real job holds or awaits.
    pending = [j for j in slurm.jobs() if j.state == "PENDING"]
    idle = {n.name for n in tree_nodes(slurm) if n.state == "IDLE" and not n.flags}
    free = len(idle - {n for j in pending for n in j.required_nodes})
    argv = [_bin("arnold-sbatch"), "--parsable", "--hold", "-N", str(free),
            "--ntasks-per-node=8", "--gpus-per-node=8", "--exclusive", "-t", "3", "-o",
            "/dev/null", "--tp", "8", "--pp", "1", "--wrap", "true"]
    t0 = time.monotonic()
    p = subprocess.run(as_user(USERS[1], argv, env={"ARNOLD_DEBUG": "1"}),
                       capture_output=True, text=True, cwd="/")
    assert p.returncode == 0, p.stderr
    waited = re.search(r"waited ([\d.]+) s for the site lock", p.stderr)
    assert waited is not None and float(waited.group(1)) < 1.0, p.stderr
    assert time.monotonic() - t0 < 30
    # The killed run's half-written record is settled by its user's next submission.
    p = subprocess.run(as_user(USERS[0], _submit_argv(USERS[0], "--hold")),
                       capture_output=True, text=True, cwd="/")
    assert p.returncode == 0, p.stderr
    db = sqlite3.connect(site.users_dir / USERS[0] / "arnold.db")
    assert db.execute("SELECT count(*) FROM jobs WHERE status = 'submitting'").fetchone() == (0,)
    db.close()


@pytest.mark.parametrize("umask", [0o077, 0o000])
def test_files_arnold_makes_have_their_documented_modes_whatever_the_umask(
        slurm: Slurm, site: SiteConfig, tmp_path: Path, umask: int) -> None:
    user = USERS[2]
    own = site.users_dir / user
    subprocess.run(["rm", "-rf", str(own)], check=True)
    _wait_free(slurm, 4)
    p = subprocess.run(as_user(user, _submit_argv(user, "--hold"), umask=umask),
                       capture_output=True, text=True, cwd="/")
    assert p.returncode == 0, p.stderr
    record = _record(site, user, int(p.stdout.strip()))
    rankfile = Path(str(record["rankfile"]))

    def mode(path: Path) -> int:
        return stat.S_IMODE(path.stat().st_mode)

    assert mode(site.users_dir) == 0o1733
    assert mode(own) == 0o755 and own.stat().st_uid == int(
        subprocess.run(["id", "-u", user], capture_output=True, text=True).stdout)
    assert mode(own / "arnold.db") == 0o644
    assert mode(rankfile.parent) == 0o755
    assert mode(rankfile) == 0o644
    assert mode(rankfile.with_suffix(".hosts")) == 0o644
    # The admin side's own set-up, under the same umask, into a fresh state directory.
    state = tmp_path / "site-state"
    env = dict(os.environ, ARNOLD_STATE_DIR=str(state))
    init = subprocess.run(["/bin/sh", "-c", f"umask {umask:03o} && exec \"$@\"", "sh",
                           _bin("arnold"), "site", "init"], env=env, capture_output=True,
                          text=True)
    assert init.returncode == 0, init.stderr
    assert mode(state) == 0o755
    assert mode(state / "jobs") == 0o1733
    assert mode(state / "submit.lock") == 0o644
    assert mode(state / "arnold.db") == 0o644
    assert mode(state / "model") == 0o755
