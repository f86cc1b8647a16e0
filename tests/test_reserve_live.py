"""``arnold reserve`` and arnold-sbatch's large-job path on the live cluster (issue 8).

The local cluster has 64 nodes of 8 GPUs; here a large job (LPJ) is one of 64 GPUs or more and
the admission gate uses time limits (``reservation.predictor = "requested"``), so that which
short job fits is known exactly; the model's gate is the same code with other numbers. With
limits as predictions a reservation never starts an LPJ before Slurm's own estimate, so the
rule that it must pay for itself (tested on its own below) is off for the mechanism's tests.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hostlist
import pytest

from slurm_arnold.slurm import AccountingRecord, Slurm
from tests.conftest import tree_nodes, wait_for_job

pytestmark = pytest.mark.live
BIN = Path(sys.executable).parent


@pytest.fixture
def env(slurm: Slurm, tmp_path: Path) -> Iterator[dict[str, str]]:
    """Our settings, a clean queue before, and no job or reservation of ours left after."""
    _clean(slurm)
    state = Path(tempfile.mkdtemp(prefix="arnold-reserve-"))
    state.chmod(0o755)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ARNOLD_")}
    environ.update(ARNOLD_STATE_DIR=str(state), ARNOLD_RESERVATION__LARGE_JOB_GPUS="64",
                   ARNOLD_RESERVATION__PREDICTOR="requested",
                   ARNOLD_RESERVATION__PAY_FOR_ITSELF="false",
                   ARNOLD_CONFIG=str(state / "user.toml"))
    yield environ
    _clean(slurm)
    shutil.rmtree(state, ignore_errors=True)


def _clean(slurm: Slurm) -> None:
    from benchmarks.multiuser import USERS

    for user in ("root", *USERS):  # the test users' jobs too (scancel skips unknown users)
        subprocess.run(["scancel", "--full", "-u", user], check=False, capture_output=True)
    deadline = time.monotonic() + 30
    while any(j.state in ("RUNNING", "PENDING", "COMPLETING") for j in slurm.jobs()):
        assert time.monotonic() < deadline, "the queue did not empty"
        time.sleep(0.3)
    for res in slurm.reservations():
        if res.name.startswith("arnold_"):
            slurm.delete_reservation(res.name)


def arnold(env: dict[str, str], *args: str, check: bool = True,
           user: str | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [str(BIN / "arnold"), *args]
    if user is not None:
        import pwd

        from benchmarks.multiuser import site_venv

        # Another user runs the site install: the checkout's own venv may sit where only
        # root can reach (a clone under a 0700 directory).
        cmd = [str(site_venv() / "bin" / "arnold"), *args]
        entry = pwd.getpwnam(user)
        cmd = ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}",
               "--clear-groups", *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def sbatch(*args: str) -> int:
    # -o /dev/null: no slurm-<id>.out left in the checkout the tests run from.
    out = subprocess.run(["sbatch", "--parsable", "-o", "/dev/null", *args],
                         capture_output=True, text=True, check=True).stdout
    return int(out.strip().split(";")[0])


def fill(nodes_busy: int, *, limit_min: int, seconds: int) -> list[int]:
    """Blocker jobs of 8 whole nodes each, on the first ``nodes_busy`` nodes, running.

    Where a test needs them gone it cancels them: a blocker that ends by itself after a few
    seconds ends early or late with the machine's load, and the test's steps with it."""
    jobs = [sbatch("-N8", "--exclusive", "--gres=gpu:8", f"--time={limit_min}",
                   f"--nodelist=n[{8 * i + 1:03d}-{8 * i + 8:03d}]", "--wrap", f"sleep {seconds}")
            for i in range(nodes_busy // 8)]
    deadline = time.monotonic() + 30
    while not all(j.state == "RUNNING" for j in Slurm().jobs() if j.job_id in jobs):
        assert time.monotonic() < deadline, "the blockers did not start"
        time.sleep(0.2)
    return jobs


def wait_state(slurm: Slurm, job_id: int, states: set[str], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = {j.job_id: j for j in slurm.jobs()}.get(job_id)
        if job is not None and job.state in states:
            return job
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} never reached {states}")


def reserved_lpj(slurm: Slurm, env: dict[str, str], nodes: int, *options: str) -> int:
    """A plain sbatch LPJ of ``nodes`` whole nodes (``options`` added), pending, that one
    ``sync`` reserves on that many nodes; its job id."""
    lpj = sbatch(f"-N{nodes}", "--exclusive", "--gres=gpu:8", "--time=3", *options, "--wrap",
                 "sleep 1")
    wait_state(slurm, lpj, {"PENDING"})
    sync = arnold(env, "reserve", "sync", "--json")
    assert f"created arnold_{lpj} on {nodes} nodes for job {lpj}" in json.loads(
        sync.stdout), sync.stderr
    return lpj


def ours(slurm: Slurm) -> dict[str, Any]:
    return {r.name: r for r in slurm.reservations() if r.name.startswith("arnold_")}


def admissions(env: dict[str, str]) -> dict[tuple[int, str], dict[str, Any]]:
    db = sqlite3.connect(Path(env["ARNOLD_STATE_DIR"]) / "arnold.db")
    db.row_factory = sqlite3.Row
    return {(r["job_id"], r["decision"]): dict(r) for r in db.execute("select * from admissions")}


def sacct_record(slurm: Slurm, job_id: int) -> AccountingRecord:
    """The finished job's record from slurmdbd, once slurmdbd has it whole (slurmctld reports
    a job ended before slurmdbd has its end and all its nodes)."""
    return slurm.finished_accounting([job_id])[job_id]


def test_an_lpj_that_cannot_start_is_reserved_on_its_planned_nodes_and_runs_there(
        slurm: Slurm, env: dict[str, str], tmp_path: Path) -> None:
    blockers = fill(48, limit_min=2, seconds=100)
    out = tmp_path / "lpj-%j.out"
    proc = subprocess.run(
        [str(BIN / "arnold-sbatch"), "--parsable", "-N24", "--gpus-per-node=8", "--exclusive",
         "-t", "3", "--tp", "8", "--pp", "4", "-o", str(out), "--wrap", "hostname"],
        capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    lpj = int(proc.stdout.strip())
    assert proc.stdout == f"{lpj}\n"  # --parsable stays sbatch's
    assert "Traceback" not in proc.stderr and "WARNING" not in proc.stderr  # news is info
    record = next(r for r in json.loads(arnold(env, "jobs", "--json").stdout)
                  if r["slurm_job_id"] == lpj)
    assert record["status"] == "queued"
    planned = set(record["nodes"])
    res = ours(slurm)[f"arnold_{lpj}"]  # the submitter is root: reserved at once
    assert set(res.nodes) == planned and res.users == ("root",)
    job = {j.job_id: j for j in slurm.jobs()}[lpj]
    assert job.reservation == f"arnold_{lpj}" and set(job.required_nodes) == planned
    assert job.state == "PENDING"
    listed = json.loads(arnold(env, "reserve", "list", "--json").stdout)
    assert [r["lpj_job_id"] for r in listed] == [lpj] and set(listed[0]["nodes"]) == planned
    for b in blockers:
        slurm.cancel(b)
    assert wait_for_job(slurm, lpj, timeout=90) == "COMPLETED"
    assert set(sacct_record(slurm, lpj).nodes) == planned
    sync = json.loads(arnold(env, "reserve", "sync", "--json").stdout)
    assert sync == [f"deleted arnold_{lpj} (its LPJ is COMPLETED)"]
    assert not ours(slurm)


def test_admission_by_prediction_cancel_and_idempotent_sync(slurm: Slurm,
                                                           env: dict[str, str]) -> None:
    blockers = fill(48, limit_min=4, seconds=200)
    # On n[041-064]: 8 nodes busy, 16 idle that the reservation keeps for it.
    lpj = sbatch("-N24", "--exclusive", "--gres=gpu:8", "--time=3", "-w", "n[041-064]",
                 "--wrap", "sleep 1")
    wait_state(slurm, lpj, {"PENDING"})
    plan = json.loads(arnold(env, "reserve", "plan", str(lpj), "--json").stdout)
    assert plan["imminent"] and plan["predictor"] == "requested"
    assert plan["source"] == "requested nodes" and plan["nodes"] == hostlist_of("n[041-064]")
    assert arnold(env, "reserve", "list").stdout.strip() == "no arnold reservations"  # a dry run
    created = time.time()
    first = json.loads(arnold(env, "reserve", "sync", "--json").stdout)
    assert first == [f"created arnold_{lpj} on 24 nodes for job {lpj}",
                     f"bound job {lpj} to arnold_{lpj}"]
    assert set(ours(slurm)[f"arnold_{lpj}"].nodes) == set(plan["nodes"])
    time.sleep(2)
    assert json.loads(arnold(env, "reserve", "sync", "--json").stdout) == []  # idempotent
    # 16 reserved nodes ran nothing between the two syncs: what the reservation cost others.
    idle_h = json.loads(arnold(env, "reserve", "list", "--json").stdout)[0][
        "reserved_idle_node_h"]
    assert 16 * 2 / 3600 <= idle_h <= 16 * (time.time() - created) / 3600
    # Blockers end by their 4-minute limits at the latest; a 1-minute job fits before, a
    # 10-minute one does not.
    short = sbatch("-N1", "--exclusive", "--gres=gpu:8", "--time=1", "--wrap", "sleep 3")
    long = sbatch("-N1", "--exclusive", "--gres=gpu:8", "--time=10", "--wrap", "sleep 3")
    wait_state(slurm, long, {"PENDING"})
    actions = json.loads(arnold(env, "reserve", "sync", "--json").stdout)
    assert f"held LPJ {lpj} while job {short} starts" in actions
    assert any(a.startswith(f"admitted job {short} into arnold_{lpj}") for a in actions)
    decided = admissions(env)
    assert decided[(short, "admit")]["upper_s"] == 60.0
    assert decided[(long, "refuse")]["upper_s"] == 600.0
    assert decided[(short, "admit")]["expected_start"] > time.time() + 60
    assert (long, "admit") not in decided
    assert wait_for_job(slurm, short, timeout=60) == "COMPLETED"
    assert json.loads(arnold(env, "reserve", "sync", "--json").stdout) == [
        f"released LPJ {lpj}"]
    assert {j.job_id: j for j in slurm.jobs()}[long].state == "PENDING"
    assert {j.job_id: j for j in slurm.jobs()}[lpj].state == "PENDING"
    assert set(sacct_record(slurm, short).nodes) <= set(plan["nodes"])
    # The LPJ is cancelled: the next sync removes its reservation, the one after does nothing.
    slurm.cancel(lpj)
    wait_state(slurm, lpj, {"CANCELLED"})
    assert json.loads(arnold(env, "reserve", "sync", "--json").stdout) == [
        f"deleted arnold_{lpj} (its LPJ is CANCELLED)"]
    assert not ours(slurm)
    assert json.loads(arnold(env, "reserve", "sync", "--json").stdout) == []
    for b in blockers:
        slurm.cancel(b)


def hostlist_of(text: str) -> list[str]:
    return list(hostlist.expand_hostlist(text))


def test_the_lpj_starts_after_an_admitted_job_ends(slurm: Slurm, env: dict[str, str]) -> None:
    # The fill outlasts the syncs and submissions (or the short job simply starts on the
    # freed nodes and needs no admission) until the test cancels it.
    blockers = fill(48, limit_min=2, seconds=100)
    lpj = sbatch("-N24", "--exclusive", "--gres=gpu:8", "--time=2", "-w", "n[041-064]",
                 "--wrap", "sleep 1")
    wait_state(slurm, lpj, {"PENDING"})
    arnold(env, "reserve", "sync")
    short = sbatch("-N1", "--exclusive", "--gres=gpu:8", "--time=1", "--wrap", "sleep 12")
    wait_state(slurm, short, {"PENDING"})
    assert any("admitted" in a for a in json.loads(
        arnold(env, "reserve", "sync", "--json").stdout))
    wait_state(slurm, short, {"RUNNING"})
    arnold(env, "reserve", "sync")  # releases the LPJ: it waits for the admitted job (share)
    for b in blockers:
        slurm.cancel(b)
    assert wait_for_job(slurm, lpj, timeout=90) == "COMPLETED"
    short_end = sacct_record(slurm, short).end
    lpj_start = sacct_record(slurm, lpj).start
    assert short_end is not None and lpj_start is not None and short_end <= lpj_start


def test_a_sync_killed_halfway_is_repaired_by_the_next(slurm: Slurm,
                                                       env: dict[str, str]) -> None:
    """The states a ``sync`` killed between its steps leaves, made directly with scontrol: a
    reservation in Slurm that the database never recorded and the LPJ not bound to it; an
    LPJ we held for an admission that was never bound."""
    fill(48, limit_min=3, seconds=150)
    lpj = sbatch("-N24", "--exclusive", "--gres=gpu:8", "--time=2", "--wrap", "sleep 1")
    wait_state(slurm, lpj, {"PENDING"})
    plan = json.loads(arnold(env, "reserve", "plan", str(lpj), "--json").stdout)
    slurm.create_reservation(f"arnold_{lpj}", plan["nodes"], users=["root"],
                             flags=["IGNORE_JOBS"])
    actions = json.loads(arnold(env, "reserve", "sync", "--json").stdout)
    assert actions == [f"adopted arnold_{lpj} (made by a run that stopped before recording it)",
                       f"bound job {lpj} to arnold_{lpj}"]
    db = sqlite3.connect(Path(env["ARNOLD_STATE_DIR"]) / "arnold.db")
    with db:
        db.execute("update reservations set lpj_held = 1")
    slurm.hold(lpj)
    assert json.loads(arnold(env, "reserve", "sync", "--json").stdout) == [
        f"released LPJ {lpj}"]
    assert not {j.job_id: j for j in slurm.jobs()}[lpj].held
    assert json.loads(arnold(env, "reserve", "sync", "--json").stdout) == []
    # A reservation whose LPJ vanished from slurmctld (purged) is deleted too. Its node is
    # one outside the LPJ's (Slurm refuses overlapping reservations).
    spare = max(n.name for n in tree_nodes(slurm) if n.name not in plan["nodes"])
    slurm.create_reservation("arnold_999999", [spare], users=["root"], flags=["IGNORE_JOBS"])
    assert json.loads(arnold(env, "reserve", "sync", "--json").stdout) == [
        "deleted arnold_999999 (its LPJ vanished)"]


def test_admin_actions_refuse_other_users_and_plan_is_for_the_owner(
        slurm: Slurm, env: dict[str, str], tmp_path: Path) -> None:
    fill(48, limit_min=2, seconds=100)
    lpj = sbatch("-N24", "--exclusive", "--gres=gpu:8", "--time=2", "--wrap", "sleep 1")
    wait_state(slurm, lpj, {"PENDING"})
    theirs = Path(tempfile.mkdtemp(prefix="arnold-nobody-"))
    theirs.chmod(0o777)
    env = dict(env, ARNOLD_STATE_DIR=str(theirs), ARNOLD_CONFIG=str(theirs / "user.toml"))
    for args in (("sync",), ("create", str(lpj)), ("release", str(lpj))):
        proc = arnold(env, "reserve", *args, check=False, user="nobody")
        assert proc.returncode == 1
        assert proc.stderr.startswith(f"arnold: error: `arnold reserve {args[0]}` is for "
                                      "cluster admins")
        assert len(proc.stderr.strip().splitlines()) == 1
    assert not ours(slurm)
    # plan is a dry run, but of one's own jobs: another user's is refused, an admin's allowed.
    proc = arnold(env, "reserve", "plan", str(lpj), check=False, user="nobody")
    assert proc.returncode == 1
    assert proc.stderr == (f"arnold: error: job {lpj} belongs to root; only root or an admin "
                           "may run `arnold reserve plan` on it\n")
    plan = arnold(env, "reserve", "plan", str(lpj))
    assert f"job {lpj} (root, 192 GPUs)" in plan.stdout
    # A user cannot make themselves an admin through their own config or environment.
    env2 = dict(env, ARNOLD_RESERVATION__ADMINS='["nobody"]')
    proc = arnold(env2, "reserve", "sync", check=False, user="nobody")
    assert proc.returncode == 1 and "is for cluster admins" in proc.stderr
    # A config file behind a directory they may not enter: one line naming it, no traceback.
    hidden = tmp_path / "user.toml"
    proc = arnold(dict(env, ARNOLD_CONFIG=str(hidden)), "reserve", "list", check=False,
                  user="nobody")
    assert proc.returncode == 1
    assert proc.stderr == (f"arnold: error: {hidden}: cannot read: permission denied on a "
                           "directory above it; fix the permissions or point ARNOLD_CONFIG "
                           "elsewhere\n")
    shutil.rmtree(theirs, ignore_errors=True)


def test_plan_explains_a_job_that_needs_no_reservation(slurm: Slurm,
                                                       env: dict[str, str]) -> None:
    small = sbatch("-N1", "--gres=gpu:8", "--hold", "--time=1", "--wrap", "true")
    proc = arnold(env, "reserve", "plan", str(small), check=False)
    assert proc.returncode == 1
    assert "below the site's large-job threshold of 64" in proc.stderr
    proc = arnold(env, "reserve", "plan", "99999999", check=False)
    assert proc.returncode == 1 and "is not in the queue" in proc.stderr


def test_bench_fidelity_quick(slurm: Slurm, env: dict[str, str]) -> None:
    """20 KTH jobs live (times / 1200) and in the simulator: the whole path runs, and the two
    mostly agree (the full run's numbers are in docs/benchmarks.md)."""
    data = Path(__file__).resolve().parents[2] / "shared" / "data" / "swf"
    if not (data / "KTH-SP2-1996-2.swf.gz").exists():
        pytest.skip(f"no shared KTH log in {data}")
    proc = arnold(env, "bench", "fidelity", "--quick", "--scale", "1200", "--data", str(data),
                  "--json")
    out = json.loads(proc.stdout)
    assert out["jobs"] == 20 and out["lpjs"] >= 1
    assert out["same_order_fraction"] >= 0.75 and out["pair_agreement"] >= 0.9
    assert len(out["per_job"]) == 20
    assert not ours(slurm)  # sync ran after the last LPJ and left nothing


@pytest.mark.skipif(os.geteuid() != 0, reason="reserve sync is the admin's; run as root")
def test_bench_sync_quick(slurm: Slurm, env: dict[str, str]) -> None:
    """100 jobs wait behind a full cluster and two large jobs: each backend's first pass
    reserves for both large jobs, and the bench leaves nothing of its own behind."""
    proc = arnold(env, "bench", "sync", "--quick", "--json")
    doc = json.loads(proc.stdout)
    assert (doc["queue"], doc["queued_seen"], doc["nodes"]) == (100, 100, 64)
    expected = ["pyslurm", "commands"] if slurm.version() == (25, 11) else ["commands"]
    assert list(doc["backends"]) == expected
    for b in doc["backends"].values():
        assert b["first_pass_actions"] >= 2  # one reservation per large job at least
        assert 0 < b["next_pass_median_s"] <= b["next_pass_p95_s"]
    assert ("ratio_first" in doc) == (len(expected) == 2)
    assert not ours(slurm)
    assert not [j for j in slurm.jobs(unfinished=True) if j.name.startswith("arnold-bench-")]


def test_a_reservation_that_would_not_beat_slurms_own_start_is_not_made(
        slurm: Slurm, env: dict[str, str]) -> None:
    # 48 nodes busy for 3 minutes by their limits. The LPJ (56 nodes) needs the 16 idle ones
    # and 40 of them; with limits as predictions its reserved start is Slurm's own estimate,
    # so reserving saves it nothing while the 16 idle nodes would wait 3 minutes for it.
    fill(48, limit_min=3, seconds=170)
    lpj = sbatch("-N56", "--exclusive", "--gres=gpu:8", "-t", "3", "--wrap", "true")
    deadline = time.monotonic() + 60
    while (job := {j.job_id: j for j in slurm.jobs()}[lpj]).start_time is None:
        assert time.monotonic() < deadline, "Slurm's backfill gave the LPJ no start estimate"
        time.sleep(0.5)
    paying = {**env, "ARNOLD_RESERVATION__PAY_FOR_ITSELF": "true"}
    plan = json.loads(arnold(paying, "reserve", "plan", str(lpj), "--json").stdout)
    assert plan["slurm_start"] == job.start_time
    assert plan["idle_node_h"] > 0.5, plan  # 16 nodes x ~3 min
    assert plan["saved_node_h"] < 0.25 * plan["idle_node_h"]
    assert plan["pays"] is False
    assert json.loads(arnold(paying, "reserve", "sync", "--json").stdout) == []
    assert f"arnold_{lpj}" not in ours(slurm)
    # The same LPJ with the rule off (the env fixture's): reserved.
    assert f"created arnold_{lpj} on 56 nodes for job {lpj}" in json.loads(
        arnold(env, "reserve", "sync", "--json").stdout)


def test_a_reservation_keeps_off_the_nodes_a_job_ahead_of_its_lpj_waits_for(
        slurm: Slurm, env: dict[str, str]) -> None:
    # 48 nodes busy; job A, ahead in the queue, waits for exactly those 48 by name (-w). The
    # LPJ behind it needs 24 nodes, so at least 8 of A's. A reservation made now on them would
    # keep A off them once they drain, and the LPJ would run first: it is not made until A
    # has started, and then it is.
    blockers = fill(48, limit_min=5, seconds=290)
    ahead = sbatch("-N48", "--gres=gpu:1", "--time=3", "-w", "n[001-048]", "--wrap",
                   "sleep 120")
    lpj = sbatch("-N24", "--exclusive", "--gres=gpu:8", "--time=3", "--wrap", "sleep 1")
    wait_state(slurm, lpj, {"PENDING"})
    plan = arnold(env, "reserve", "plan", str(lpj), check=False)
    assert plan.returncode == 1 and "Traceback" not in plan.stderr
    assert "ahead of it in the queue" in plan.stderr and "not reserved" in plan.stderr
    assert json.loads(arnold(env, "reserve", "sync", "--json").stdout) == []
    assert not ours(slurm)
    # Held while the blockers go: their nodes free one job at a time, and Slurm's backfill
    # may run the short LPJ on the first 24 free ones before A has all 48 (seen in CI).
    slurm.hold(lpj)
    for b in blockers:
        slurm.cancel(b)
    wait_state(slurm, ahead, {"RUNNING"})  # on its nodes, not shut out by a reservation
    slurm.release(lpj)
    wait_state(slurm, lpj, {"PENDING"})
    sync = arnold(env, "reserve", "sync", "--json")
    actions = json.loads(sync.stdout)
    assert f"created arnold_{lpj} on 24 nodes for job {lpj}" in actions, sync.stderr
    assert len(set(ours(slurm)[f"arnold_{lpj}"].nodes) & set(hostlist_of("n[001-048]"))) >= 8


def test_a_job_ahead_waiting_on_a_dependency_keeps_no_nodes_from_the_lpj(
        slurm: Slurm, env: dict[str, str]) -> None:
    # As above, but job A waits on a dependency that may never be met: the LPJ behind it,
    # asking for 24 of A's nodes by name, is reserved there at once (it would otherwise wait
    # as long as A's dependency does).
    blockers = fill(48, limit_min=5, seconds=290)
    ahead = sbatch("-N48", "--gres=gpu:1", "--time=3", "-w", "n[001-048]",
                   f"--dependency=afterok:{blockers[0]}", "--wrap", "sleep 1")
    lpj = sbatch("-N24", "--exclusive", "--gres=gpu:8", "--time=3", "-w", "n[001-024]",
                 "--wrap", "sleep 1")
    wait_state(slurm, lpj, {"PENDING"})
    assert {j.job_id: j for j in slurm.jobs()}[ahead].reason == "Dependency"
    sync = arnold(env, "reserve", "sync", "--json")
    assert f"created arnold_{lpj} on 24 nodes for job {lpj}" in json.loads(sync.stdout), \
        sync.stderr
    assert set(ours(slurm)[f"arnold_{lpj}"].nodes) == set(hostlist_of("n[001-024]"))


def test_a_job_behind_the_lpj_keeps_no_nodes_from_its_reservation(
        slurm: Slurm, env: dict[str, str]) -> None:
    # The same queue with the two submitted the other way round: the LPJ is ahead, so a job
    # behind it naming nodes does not keep them (Slurm's priority would not either).
    fill(48, limit_min=5, seconds=290)
    lpj = sbatch("-N24", "--exclusive", "--gres=gpu:8", "--time=3", "--wrap", "sleep 1")
    behind = sbatch("-N48", "--gres=gpu:1", "--time=3", "-w", "n[001-048]", "--wrap",
                    "sleep 1")
    wait_state(slurm, behind, {"PENDING"})
    actions = json.loads(arnold(env, "reserve", "sync", "--json").stdout)
    assert f"created arnold_{lpj} on 24 nodes for job {lpj}" in actions
    assert len(set(ours(slurm)[f"arnold_{lpj}"].nodes) & set(hostlist_of("n[001-048]"))) >= 8
    assert {j.job_id: j for j in slurm.jobs()}[behind].state == "PENDING"


def test_a_reservation_stays_on_nodes_its_lpj_may_use(slurm: Slurm, env: dict[str, str]) -> None:
    # A plain sbatch LPJ that excludes n[001-024] (-x): those drain as soon as any busy node
    # and lie first in the tree, but its reservation must not hold them (the job could never
    # start in it).
    fill(48, limit_min=5, seconds=290)
    lpj = sbatch("-N24", "--exclusive", "--gres=gpu:8", "--time=3", "-x", "n[001-024]",
                 "--wrap", "sleep 1")
    wait_state(slurm, lpj, {"PENDING"})
    assert {j.job_id: j for j in slurm.jobs()}[lpj].excluded_nodes == tuple(
        hostlist_of("n[001-024]"))
    actions = json.loads(arnold(env, "reserve", "sync", "--json").stdout)
    assert f"created arnold_{lpj} on 24 nodes for job {lpj}" in actions
    assert not set(ours(slurm)[f"arnold_{lpj}"].nodes) & set(hostlist_of("n[001-024]"))


def test_an_lpj_naming_some_of_its_nodes_is_not_reserved_without_them(
        slurm: Slurm, env: dict[str, str]) -> None:
    # A plain sbatch LPJ of 16 nodes that names one busy node (-w n041), busy for an hour by
    # its limit while n[001-040] drain in 5 minutes and n[049-064] are idle: every pool the
    # policy weighs (at most 3 x 16 nodes, the first to drain) leaves n041 out. Bound to a
    # reservation without it, the job could never start; it is not reserved and waits as an
    # ordinary job.
    fill(40, limit_min=5, seconds=290)
    late = sbatch("-N8", "--exclusive", "--gres=gpu:8", "--time=60", "-w", "n[041-048]",
                  "--wrap", "sleep 290")
    wait_state(slurm, late, {"RUNNING"})
    lpj = sbatch("-N16", "--exclusive", "--gres=gpu:8", "--time=3", "-w", "n041", "--wrap",
                 "sleep 1")
    job = wait_state(slurm, lpj, {"PENDING"})
    assert job.required_nodes == ("n041",)
    plan = arnold(env, "reserve", "plan", str(lpj), check=False)
    assert plan.returncode == 1 and "Traceback" not in plan.stderr, plan.stdout
    assert "n041" in plan.stderr and "not reserved" in plan.stderr
    assert len(plan.stderr.strip().splitlines()) == 1, plan.stderr
    sync = arnold(env, "reserve", "sync", "--json")
    assert json.loads(sync.stdout) == [], sync.stderr
    assert not ours(slurm)
    assert {j.job_id: j for j in slurm.jobs()}[lpj].reservation in ("", None)


def test_a_reservation_moves_off_a_node_drained_under_its_waiting_lpj(
        slurm: Slurm, env: dict[str, str]) -> None:
    # A plain sbatch LPJ reserved on 24 nodes; an admin drains one of them while it waits.
    # Bound to the reservation, it could start only once that node came back: sync moves the
    # reservation to usable nodes, and the LPJ runs there when the blockers go.
    blockers = fill(48, limit_min=5, seconds=290)
    lpj = reserved_lpj(slurm, env, 24)
    victim = ours(slurm)[f"arnold_{lpj}"].nodes[9]
    subprocess.run(["scontrol", "update", f"NodeName={victim}", "State=DRAIN",
                    "Reason=arnold-test"], check=True)
    try:
        sync = arnold(env, "reserve", "sync", "--json")
        actions = json.loads(sync.stdout)
        assert any(a.startswith(f"moved arnold_{lpj} off {victim} (unusable) to ")
                   for a in actions), (actions, sync.stderr)
        moved = ours(slurm)[f"arnold_{lpj}"].nodes
        assert len(moved) == 24 and victim not in moved
        listed = json.loads(arnold(env, "reserve", "list", "--json").stdout)
        assert set(listed[0]["nodes"]) == set(moved)
        assert json.loads(arnold(env, "reserve", "sync", "--json").stdout) == []  # settled
        for b in blockers:
            slurm.cancel(b)
        assert wait_for_job(slurm, lpj, timeout=90) == "COMPLETED"
        assert set(sacct_record(slurm, lpj).nodes) == set(moved)
    finally:
        subprocess.run(["scontrol", "update", f"NodeName={victim}", "State=RESUME"],
                       check=True)


def test_a_short_job_is_admitted_only_where_its_options_let_it_run(
        slurm: Slurm, env: dict[str, str]) -> None:
    # The LPJ's reservation holds 16 idle nodes, n[049-064]. A 1-minute job that excludes
    # them all (-x) could not start in it: not admitted (its LPJ is not held for it). One
    # that excludes all but n[061-064] is, and runs there.
    fill(48, limit_min=4, seconds=200)
    lpj = reserved_lpj(slurm, env, 24, "-w", "n[041-064]")
    barred = sbatch("-N1", "--exclusive", "--gres=gpu:8", "--time=1", "-x", "n[049-064]",
                    "--wrap", "sleep 3")
    wait_state(slurm, barred, {"PENDING"})
    actions = json.loads(arnold(env, "reserve", "sync", "--json").stdout)
    assert not any("admitted" in a or "held" in a for a in actions), actions
    assert (barred, "admit") not in admissions(env)
    narrow = sbatch("-N1", "--exclusive", "--gres=gpu:8", "--time=1", "-x", "n[049-060]",
                    "--wrap", "sleep 3")
    wait_state(slurm, narrow, {"PENDING"})
    actions = json.loads(arnold(env, "reserve", "sync", "--json").stdout)
    assert any(a.startswith(f"admitted job {narrow} into arnold_{lpj}") for a in actions)
    assert not any(a.startswith(f"admitted job {barred}") for a in actions)
    assert wait_for_job(slurm, narrow, timeout=60) == "COMPLETED"
    assert set(sacct_record(slurm, narrow).nodes) <= set(hostlist_of("n[061-064]"))


def _sbatch_as(user: str, *args: str) -> subprocess.CompletedProcess[str]:
    from benchmarks.multiuser import as_user

    return subprocess.run(as_user(user, ["sbatch", "--parsable", "-o", "/dev/null", *args]),
                          capture_output=True, text=True, cwd="/")


def test_an_admitted_user_leaves_the_reservation_with_the_job(
        slurm: Slurm, env: dict[str, str], site: Any) -> None:
    # Another user's 1-minute job is admitted into root's LPJ reservation (its user added to
    # it); once the job is done the user is taken out again, so `sbatch --reservation` cannot
    # pass the gate later; a job its user bound by hand meanwhile is unbound.
    from benchmarks.multiuser import USERS

    user = USERS[0]
    fill(48, limit_min=4, seconds=200)
    lpj = sbatch("-N24", "--exclusive", "--gres=gpu:8", "--time=3", "-w", "n[041-064]",
                 "--wrap", "sleep 1")
    wait_state(slurm, lpj, {"PENDING"})
    name = f"arnold_{lpj}"
    arnold(env, "reserve", "sync")
    # Not yet in the reservation: Slurm refuses the user's own binding.
    assert _sbatch_as(user, "--reservation", name, "-N1", "--time=1", "--wrap",
                      "true").returncode != 0
    short = int(_sbatch_as(user, "-N1", "--exclusive", "--gres=gpu:8", "--time=1",
                           "--wrap", "sleep 20").stdout)
    wait_state(slurm, short, {"PENDING"})
    actions = json.loads(arnold(env, "reserve", "sync", "--json").stdout)
    assert any(a.startswith(f"admitted job {short} into {name}") for a in actions), actions
    assert user in ours(slurm)[name].users
    wait_state(slurm, short, {"RUNNING"})
    # In the reservation now, the user binds another job by hand: the next sync unbinds it
    # (and keeps the user while the admitted job runs).
    own = int(_sbatch_as(user, "--reservation", name, "--hold", "-N1", "--time=1",
                         "--wrap", "true").stdout)
    actions = json.loads(arnold(env, "reserve", "sync", "--json").stdout)
    assert f"unbound job {own} from {name}: not admitted" in actions, actions
    assert not {j.job_id: j for j in slurm.jobs()}[own].reservation
    assert user in ours(slurm)[name].users
    assert wait_for_job(slurm, short, timeout=60) == "COMPLETED"
    actions = json.loads(arnold(env, "reserve", "sync", "--json").stdout)
    assert f"removed {user} from {name}: no job of theirs in it" in actions, actions
    assert ours(slurm)[name].users == ("root",)
    assert _sbatch_as(user, "--reservation", name, "-N1", "--time=1", "--wrap",
                      "true").returncode != 0
    assert json.loads(arnold(env, "reserve", "sync", "--json").stdout) == []


def test_two_users_admitted_in_one_sync_both_stay_in_the_reservation(
        slurm: Slurm, env: dict[str, str], site: Any) -> None:
    # Two users' 1-minute jobs wait at once; one sync admits both into the LPJ's reservation.
    # The second admission must not write the users list the first one found (dropping the
    # first user, whose bound job could then not start).
    from benchmarks.multiuser import USERS

    first, second = USERS[:2]
    fill(48, limit_min=4, seconds=200)
    lpj = sbatch("-N24", "--exclusive", "--gres=gpu:8", "--time=3", "-w", "n[041-064]",
                 "--wrap", "sleep 1")
    wait_state(slurm, lpj, {"PENDING"})
    name = f"arnold_{lpj}"
    arnold(env, "reserve", "sync")
    jobs = [int(_sbatch_as(user, "-N1", "--exclusive", "--gres=gpu:8", "--time=1", "--wrap",
                           "sleep 20").stdout) for user in (first, second)]
    for job in jobs:
        wait_state(slurm, job, {"PENDING"})
    actions = json.loads(arnold(env, "reserve", "sync", "--json").stdout)
    for job in jobs:
        assert any(a.startswith(f"admitted job {job} into {name}") for a in actions), actions
    assert {first, second} <= set(ours(slurm)[name].users)
    for job in jobs:
        wait_state(slurm, job, {"RUNNING"}, timeout=30)


def test_a_reservation_whose_lpj_someone_else_holds_is_released_and_made_again(
        slurm: Slurm, env: dict[str, str]) -> None:
    # Held by an admin (or by Slurm: a failed launch is requeued held), the LPJ may wait for
    # ever and its reserved nodes with it; seen in `arnold bench site` after a slurmctld kill.
    fill(48, limit_min=5, seconds=290)
    lpj = sbatch("-N24", "--exclusive", "--gres=gpu:8", "--time=3", "--wrap", "sleep 1")
    wait_state(slurm, lpj, {"PENDING"})
    actions = json.loads(arnold(env, "reserve", "sync", "--json").stdout)
    assert f"created arnold_{lpj} on 24 nodes for job {lpj}" in actions
    slurm.hold(lpj)
    actions = json.loads(arnold(env, "reserve", "sync", "--json").stdout)
    assert f"deleted arnold_{lpj} (its LPJ is held (JobHeldAdmin))" in actions, actions
    assert f"arnold_{lpj}" not in ours(slurm)
    assert json.loads(arnold(env, "reserve", "sync", "--json").stdout) == []
    slurm.release(lpj)
    wait_state(slurm, lpj, {"PENDING"})
    actions = json.loads(arnold(env, "reserve", "sync", "--json").stdout)
    assert f"created arnold_{lpj} on 24 nodes for job {lpj}" in actions, actions
