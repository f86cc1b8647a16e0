"""The Slurm adapter against the real local cluster (``make cluster``)."""

from __future__ import annotations

import getpass
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_arnold.slurm import JobInfo, Slurm
from slurm_arnold.snapshot.live import live_cluster
from slurm_arnold.topology import read_topology_file
from tests.conftest import tree_nodes, wait_for_job

pytestmark = pytest.mark.live


def test_live_topology_equals_the_topology_conf_it_started_with(
    slurm: Slurm, slurm_conf_dir: Path
) -> None:
    view = live_cluster(slurm)
    conf = read_topology_file(str(slurm_conf_dir / "topology.conf"),
                              known_nodes=[n.name for n in slurm.nodes()])
    assert view.topology.switches == conf.switches
    assert view.topology.node_leaf == conf.node_leaf
    assert len(view.topology.minipods()) >= 2


def test_json_and_text_parsers_agree_on_the_live_cluster(slurm: Slurm) -> None:
    text = Slurm(use_json=False)
    assert {n.name: n for n in slurm.nodes()} == {n.name: n for n in text.nodes()}
    assert all(n.gpus_total > 0 for n in slurm.nodes())


def test_this_slurms_json_is_read_natively_not_by_falling_back(slurm: Slurm) -> None:
    # 22.05 and 24.11 onwards each have a parser: none of the three documents may fall back.
    fresh = Slurm()
    expected = {(22, 5): "v0.0.38"}.get(fresh.version(), "v0.0.4x")
    assert fresh.json_family == expected
    assert fresh.nodes() and fresh.jobs() is not None and fresh.accounting(since="now-1hour") \
        is not None
    assert fresh.use_json, "a --json schema had no parser: the adapter fell back to text"


def test_the_older_data_parsers_this_slurm_still_prints_read_the_same(slurm: Slurm) -> None:
    # 26.05 still prints the schemas of 24.11 (v0.0.42), 25.05 and 25.11 on request: each
    # must read as the native one does.
    from slurm_arnold.slurm import JSON_V004X
    from slurm_arnold.slurm.nodes import nodes_from_json as _nodes_from_json

    if slurm.json_family != "v0.0.4x":
        pytest.skip("this Slurm prints no data_parser v0.0.4x")
    native = {n.name: n for n in slurm.nodes()}
    # The schemas up to this Slurm's own (25.11 prints v0.0.44 at most).
    newest = {(24, 11): 42, (25, 5): 43, (25, 11): 44}.get(slurm.version(), 45)
    for schema in sorted(s for s in JSON_V004X if int(s.rsplit(".", 1)[1]) <= newest):
        version = schema.split("/")[1]
        doc = json.loads(slurm.run(["scontrol", "show", "nodes", f"--json={version}"]).stdout)
        assert doc["meta"]["plugin"]["data_parser"] == schema
        assert {n.name: n for n in _nodes_from_json(doc)} == native


def test_json_and_text_job_lists_agree_on_awkward_jobs(slurm: Slurm) -> None:
    # The text path (what arnold-sbatch reads inside the site lock) must see what --json sees:
    # a name with "|" and spaces (the one free-form field), a GPU total (--gpus) rather than
    # per node, required nodes (-w), a running job's nodes.
    free = [n.name for n in slurm.nodes() if n.state == "IDLE" and not n.flags][:3]
    assert len(free) == 3, "needs 3 idle nodes"
    tag = uuid.uuid4().hex[:6]
    ids = [
        slurm.submit(["--hold", "-N", "2", "--gpus=12", "-t", "5", "-J", f"a|b c|{tag}",
                      "-x", free[2], "-o", "/dev/null"], "#!/bin/bash\ntrue\n"),
        slurm.submit(["--hold", "-N", "1", "--gpus-per-node=4", "-w", free[0], "-t", "5",
                      "-J", f"pinned-{tag}", "-o", "/dev/null"], "#!/bin/bash\ntrue\n"),
        slurm.submit(["-N", "2", "--gpus-per-node=8", "-w", ",".join(free[1:]), "-t", "5",
                      "-J", f"running-{tag}", "-o", "/dev/null"], "#!/bin/bash\nsleep 60\n"),
    ]
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            running = {j.job_id: j for j in slurm.jobs(unfinished=True)}
            if running.get(ids[2]) and running[ids[2]].state == "RUNNING":
                break
            time.sleep(0.5)
        by_json = {j.job_id: j for j in slurm.jobs() if j.job_id in ids}
        by_text = {j.job_id: j for j in slurm.jobs(unfinished=True) if j.job_id in ids}
        by_all_text = {j.job_id: j for j in Slurm(use_json=False).jobs() if j.job_id in ids}
        by_detail = {j.job_id: j for j in slurm.jobs(unfinished=True, detail=True)
                     if j.job_id in ids}
        # The text has no -x or -C unless asked for them (``detail``).
        assert by_detail == by_json
        assert by_json[ids[0]].excluded_nodes == (free[2],)
        # Without ``detail`` a backend may leave them out (the commands do) or read them anyway
        # (pyslurm reads every field at once): compare what both must carry.
        def without_detail(jobs: dict[int, JobInfo]) -> dict[int, JobInfo]:
            return {i: replace(j, excluded_nodes=(), features="") for i, j in jobs.items()}

        assert (without_detail(by_text) == without_detail(by_all_text)
                == without_detail(by_json))
        assert by_all_text == without_detail(by_json)  # the commands' text path: no -x, -C
        assert by_text[ids[0]].name == f"a|b c|{tag}" and by_text[ids[0]].gpus == 12
        assert by_text[ids[1]].required_nodes == (free[0],)
        assert by_text[ids[2]].state == "RUNNING" and set(by_text[ids[2]].nodes) == set(free[1:])
    finally:
        for job_id in ids:
            slurm.cancel(job_id)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(
            j.job_id in ids for j in slurm.jobs(unfinished=True)):
        time.sleep(0.5)
    assert not any(j.job_id in ids for j in slurm.jobs(unfinished=True))


@pytest.fixture
def reservation_name() -> Iterator[str]:
    name = f"arnoldtest_{uuid.uuid4().hex[:8]}"
    yield name
    subprocess.run(["scontrol", "delete", f"ReservationName={name}"], capture_output=True)


def test_reservation_create_show_delete(slurm: Slurm, reservation_name: str) -> None:
    nodes = sorted(tree_nodes(slurm), key=lambda n: n.name)[-2:]
    names = [n.name for n in nodes]
    slurm.create_reservation(reservation_name, names, users=[getpass.getuser()],
                             duration="10", flags=["IGNORE_JOBS"])
    shown = subprocess.run(["scontrol", "show", "reservation", reservation_name],
                           capture_output=True, text=True, check=True).stdout
    assert f"ReservationName={reservation_name}" in shown
    ours = {r.name: r for r in slurm.reservations()}[reservation_name]
    assert sorted(ours.nodes) == names
    assert ours.state == "ACTIVE"
    # Someone else (26.05 refuses "nobody" as a user id; "daemon" is on every Debian).
    slurm.update_reservation(reservation_name, Users="daemon")
    view = live_cluster(slurm)
    assert not set(names) & view.free  # reserved for somebody else: not free for us
    slurm.delete_reservation(reservation_name)
    assert reservation_name not in {r.name for r in slurm.reservations()}
    assert set(names) <= live_cluster(slurm).free


def test_a_reservation_listing_us_frees_its_nodes_only_for_a_job_naming_it(
        slurm: Slurm, reservation_name: str) -> None:
    # Slurm runs a job on reserved nodes only when it names the reservation, and a job naming
    # one only on its nodes: a placement that ignored this would wait for ever.
    name = sorted(n.name for n in tree_nodes(slurm))[0]
    slurm.create_reservation(reservation_name, [name], users=[getpass.getuser()], duration="10")
    assert name not in live_cluster(slurm).free
    assert live_cluster(slurm, reservation=reservation_name).free == {name}


def test_drained_node_is_not_free(slurm: Slurm) -> None:
    node = sorted(n.name for n in tree_nodes(slurm))[-1]
    slurm.run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=arnold-test"])
    try:
        info = {n.name: n for n in slurm.nodes()}[node]
        assert "DRAIN" in info.flags
        assert info.gpus_free == 0
        assert node not in live_cluster(slurm).free
    finally:
        slurm.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])
    # slurmctld marks a resumed node NOT_RESPONDING until its slurmd next answers a ping.
    deadline = time.monotonic() + 120
    while node not in live_cluster(slurm).free:
        assert time.monotonic() < deadline, f"{node} not free again after RESUME"
        time.sleep(0.5)


def test_submitted_job_runs_and_is_read_back_from_sacct(slurm: Slurm) -> None:
    name = f"arnoldtest-{uuid.uuid4().hex[:6]}"
    job_id = slurm.submit(["-N", "2", "--gpus-per-node=8", "-t", "5", "-J", name, "-o",
                           "/dev/null"], "#!/bin/bash\nsrun true\n")
    queued = {j.job_id: j for j in slurm.jobs()}
    assert job_id in queued and queued[job_id].name == name
    record = slurm.finished_accounting([job_id])[job_id]
    assert record.state == "COMPLETED"
    assert record.name == name
    assert record.user == getpass.getuser()
    assert record.node_count == 2 and len(record.nodes) == 2
    assert record.gpus == 16
    assert record.exit_code == 0
    assert record.time_limit_min == 5
    assert record.submit is not None and record.start is not None and record.end is not None
    assert record.submit <= record.start <= record.end
    text = Slurm(use_json=False).accounting([job_id])
    assert text == [record]
    assert Slurm(use_json=False).jobs() and any(j.job_id == job_id for j in slurm.jobs())


def test_a_job_read_back_the_moment_it_ends_lists_all_its_nodes(slurm: Slurm) -> None:
    # 22.05's slurmdbd lists a just-ended 24-node job on its first node alone for a second or
    # two; the adapter waits for the whole record.
    job_id = slurm.submit(["-N", "24", "--exclusive", "--gpus-per-node=8", "-t", "2", "-o",
                           "/dev/null"], "#!/bin/bash\ntrue\n")
    assert wait_for_job(slurm, job_id) == "COMPLETED"
    record = slurm.finished_accounting([job_id])[job_id]
    assert record.node_count == 24 and len(set(record.nodes)) == 24 and record.settled


def test_failing_command_raises_with_command_and_stderr(slurm: Slurm) -> None:
    from slurm_arnold.errors import SlurmError

    with pytest.raises(SlurmError) as err:  # the commands' runner (pyslurm has no command)
        Slurm(backend="commands").delete_reservation("arnold_no_such_reservation")
    assert err.value.command[:2] == ["scontrol", "delete"]
    assert err.value.returncode != 0
    assert "arnold_no_such_reservation" in str(err.value) or err.value.stderr
