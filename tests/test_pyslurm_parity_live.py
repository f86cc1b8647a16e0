"""Every read of the Slurm adapter through pyslurm equals the same read through Slurm's
commands, on the same cluster state (the 25.11 lane, where pyslurm is built for the running
Slurm: ``make test SLURM=25.11``): running, pending, held and finished jobs, a name with
``|`` and unicode, drained and down nodes, a reservation with users and flags; and the
reservation writes through pyslurm do what scontrol's do."""

from __future__ import annotations

import importlib.util
import time
import uuid
from collections.abc import Iterator

import pytest

from benchmarks.multiuser import USERS, ensure_users
from slurm_arnold.slurm import UNFINISHED, Slurm
from slurm_arnold.slurm.choice import pyslurm_problem
from tests.conftest import tree_nodes, wait_for_job

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def both(slurm: Slurm) -> tuple[Slurm, Slurm]:
    """The adapter through pyslurm and through the commands, on this cluster."""
    if importlib.util.find_spec("pyslurm") is None:
        pytest.skip("pyslurm is not installed: it is built for the 25.11 lane "
                    "(make test SLURM=25.11)")
    problem = pyslurm_problem(slurm)
    if problem is not None:
        pytest.skip(f"{problem}: the parity tests run on the 25.11 lane")
    return Slurm(backend="pyslurm"), Slurm(backend="commands")


@pytest.fixture
def jobs(slurm: Slurm) -> Iterator[list[int]]:
    """Jobs in every state the adapter reads, cancelled afterwards."""
    made: list[int] = []
    yield made
    for job_id in made:
        slurm.cancel(job_id)


def test_node_reads_are_equal_with_drained_and_down_nodes(both: tuple[Slurm, Slurm],
                                                          slurm: Slurm) -> None:
    via_pyslurm, via_commands = both
    first, second = (n.name for n in tree_nodes(slurm)[-2:])
    slurm.run(["scontrol", "update", f"NodeName={first}", "State=DRAIN", "Reason=parity"])
    slurm.run(["scontrol", "update", f"NodeName={second}", "State=DOWN", "Reason=parity"])
    try:
        ours = {n.name: n for n in via_pyslurm.nodes()}
        theirs = {n.name: n for n in via_commands.nodes()}
        assert ours == theirs
        assert "DRAIN" in ours[first].flags and ours[second].state == "DOWN"
    finally:
        for node in (first, second):
            slurm.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])


def test_job_reads_are_equal_in_every_state(both: tuple[Slurm, Slurm], slurm: Slurm,
                                            jobs: list[int]) -> None:
    via_pyslurm, via_commands = both
    tag = uuid.uuid4().hex[:6]
    done = slurm.submit(["-N", "1", "-J", f"done-{tag}", "-o", "/dev/null", "--wrap", "true"])
    jobs.append(done)
    assert wait_for_job(slurm, done) == "COMPLETED"
    jobs.append(slurm.submit(["-N", "2", "--gpus-per-node=8", "-J", f"run|ü-{tag}",
                              "-o", "/dev/null", "--wrap", "sleep 300"]))
    jobs.append(slurm.submit(["--hold", "-N", "4", "-x", tree_nodes(slurm)[0].name,
                              "-J", f"held-{tag}", "-o", "/dev/null", "--wrap", "true"]))
    # Every node of the partition while two run something: it waits for resources.
    jobs.append(slurm.submit(["-N", str(len(tree_nodes(slurm))), "--exclusive",
                              "-J", f"pend-{tag}", "-o", "/dev/null", "--wrap", "true"]))
    # A job naming a drained node: slurmctld gives it a description beside its reason
    # (pyslurm's Job.state_reason returns the description; the adapter must give the reason).
    drained = tree_nodes(slurm)[-1].name
    slurm.run(["scontrol", "update", f"NodeName={drained}", "State=DRAIN", "Reason=parity"])
    try:
        jobs.append(slurm.submit(["-w", drained, "-N", "1", "-J", f"named-{tag}",
                                  "-o", "/dev/null", "--wrap", "true"]))
        time.sleep(2)  # a scheduling pass gives it its reason
        named = {j.job_id: j for j in via_pyslurm.jobs()}[jobs[-1]]
        assert named == {j.job_id: j for j in via_commands.jobs()}[jobs[-1]]
        assert named.reason == "ReqNodeNotAvail"
    finally:
        slurm.run(["scontrol", "update", f"NodeName={drained}", "State=RESUME"])
    deadline = time.monotonic() + 30
    while slurm.job(jobs[1]) is None or slurm.job(jobs[1]).state != "RUNNING":  # type: ignore
        assert time.monotonic() < deadline, "the running job did not start"
        time.sleep(0.5)
    # The commands' JSON (their unfinished-only read is text, which has no -x/-C: pyslurm's
    # has them, as their JSON does).
    theirs = {j.job_id: j for j in via_commands.jobs() if j.job_id in jobs}
    ours = {j.job_id: j for j in via_pyslurm.jobs() if j.job_id in jobs}
    assert ours == theirs
    unfinished = {j.job_id: j for j in via_pyslurm.jobs(unfinished=True) if j.job_id in jobs}
    assert unfinished == {i: j for i, j in theirs.items() if j.state in UNFINISHED}
    detail = {j.job_id: j for j in via_commands.jobs(unfinished=True, detail=True)
              if j.job_id in jobs}
    assert {i: (j.excluded_nodes, j.features) for i, j in detail.items()} == \
        {i: (j.excluded_nodes, j.features) for i, j in unfinished.items()}
    assert {j.state for j in ours.values()} >= {"RUNNING", "PENDING", "COMPLETED"}
    assert ours[jobs[2]].excluded_nodes == (tree_nodes(slurm)[0].name,)


def test_accounting_reads_are_equal(both: tuple[Slurm, Slurm], slurm: Slurm) -> None:
    via_pyslurm, via_commands = both
    job = slurm.submit(["-N", "2", "-J", "acct|ü", "-o", "/dev/null", "--wrap", "true"])
    assert wait_for_job(slurm, job) == "COMPLETED"
    theirs = via_commands.finished_accounting([job])
    assert via_pyslurm.finished_accounting([job]) == theirs


def test_reservation_reads_and_writes_through_pyslurm(both: tuple[Slurm, Slurm],
                                                     slurm: Slurm) -> None:
    via_pyslurm, via_commands = both
    name = f"parity_{uuid.uuid4().hex[:6]}"
    nodes = [n.name for n in tree_nodes(slurm)[-4:]]
    other = ensure_users(USERS[:1])[0]  # Slurm refuses nobody (uid 65534) as a user
    via_pyslurm.create_reservation(name, nodes, users=["root", other],
                                   flags=["IGNORE_JOBS"])
    try:
        def read(adapter: Slurm) -> object:
            return {r.name: r for r in adapter.reservations()}[name]

        assert read(via_pyslurm) == read(via_commands)
        shown = {r.name: r for r in via_commands.reservations()}[name]
        assert set(shown.nodes) == set(nodes) and set(shown.users) == {"root", other}
        assert "IGNORE_JOBS" in shown.flags and shown.state == "ACTIVE"
        via_pyslurm.update_reservation(name, Nodes=",".join(nodes[:2]), Users="root")
        shown = {r.name: r for r in via_commands.reservations()}[name]
        assert set(shown.nodes) == set(nodes[:2]) and shown.users == ("root",)
    finally:
        via_pyslurm.delete_reservation(name)
    assert name not in {r.name for r in via_commands.reservations()}
