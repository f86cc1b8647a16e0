"""The binder's decisions on one snapshot, built here rather than read from Slurm (the live
tests in ``test_queue_live`` cover the same code against slurmctld): a waiting job whose
planned nodes are held for a large job ahead of it waits for them, as it would for nodes
running that job; held for one behind it, they are lost to it and its plan is repaired."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, cast

import pytest

from predictor.live import LivePredictor
from reservations.binder import Binder
from site_config import load_config
from slurm_arnold.slurm import JobInfo, NodeInfo, Reservation
from slurm_arnold.snapshot.snapshot import Snapshot
from slurm_arnold.snapshot.view import ClusterView
from slurm_arnold.submit.spec import JobSpec
from slurm_arnold.topology import parse_topology

TOPOLOGY = """\
SwitchName=s1 Nodes=n[1-4]
SwitchName=s2 Nodes=n[5-8]
SwitchName=top Switches=s[1-2]
"""
FIRST, SECOND = ("n1", "n2", "n3", "n4"), ("n5", "n6", "n7", "n8")


def _pending(job_id: int, priority: int, required: tuple[str, ...]) -> JobInfo:
    return JobInfo(job_id, f"big{job_id}", "me", "PENDING", (), "gpu", 60, None, None, None,
                   node_count=4, gpus=32, submit_time=int(time.time()) - 60,
                   required_nodes=required, reason="Resources", priority=priority)


def _snapshot(lpj_priority: int) -> tuple[Snapshot, JobInfo]:
    """n1-n4 idle and reserved for the large job 10; n5-n8 running job 5 for an hour; job 11
    (priority 100) planned on n1-n4."""
    topo = parse_topology(TOPOLOGY, "topology.conf")
    nodes = {n: NodeInfo(n, "IDLE" if n in FIRST else "ALLOCATED", frozenset(), ("gpu",), 8,
                         0 if n in FIRST else 8) for n in topo.nodes}
    view = ClusterView(topo, nodes, set(FIRST), "gpu")
    now = int(time.time())
    running = JobInfo(5, "other", "you", "RUNNING", SECOND, "gpu", 60, now - 60, now + 3540,
                      None, node_count=4, gpus=32)
    lpj = _pending(10, lpj_priority, FIRST)
    job = _pending(11, 100, FIRST)
    reservation = Reservation("arnold_10", FIRST, "now", "later", ("me",), (), "ACTIVE")
    return Snapshot.of(view, [running, lpj, job], [reservation]), job


def _decide(tmp_path: Path, snap: Snapshot, job: JobInfo) -> Any:
    config = load_config({"state_dir": str(tmp_path / "state"),
                          "reservation": {"predictor": "requested"}})
    binder = Binder(config, cast(Any, None), cast(Any, None), time_limit=10)
    spec = JobSpec(job.job_id, job.user, "0123abcd", 8, 2, 2, 8, 0.5, "mip", "tp-dp-pp")
    predictor = LivePredictor(config, None, list(snap.jobs.values()))
    taken = {n for j in snap.jobs.values() for n in (*j.nodes, *j.required_nodes)}
    named = {n for j in snap.jobs.values() if j.state == "PENDING" for n in j.required_nodes}
    return binder._decide(snap, predictor, job, spec, taken, named)


def test_a_job_planned_on_nodes_held_for_a_large_job_ahead_waits_for_them(
        tmp_path: Path) -> None:
    snap, job = _snapshot(lpj_priority=200)
    assert _decide(tmp_path, snap, job) is None


def test_a_job_planned_on_nodes_held_for_a_large_job_behind_it_is_repaired(
        tmp_path: Path) -> None:
    snap, job = _snapshot(lpj_priority=50)
    move = _decide(tmp_path, snap, job)
    assert move is not None and move.kind == "repair", move
    assert set(move.placement.nodes()) == set(SECOND)
    assert "n[1-4] unusable" in move.reason


@pytest.mark.parametrize("state", ["RUNNING", "CONFIGURING"])
def test_nodes_held_for_a_large_job_that_runs_are_not_lost_either(tmp_path: Path,
                                                                   state: str) -> None:
    snap, job = _snapshot(lpj_priority=50)
    lpj = snap.jobs[10]
    snap.jobs[10] = JobInfo(10, lpj.name, lpj.user, state, FIRST, "gpu", 60,
                            int(time.time()), None, "arnold_10", node_count=4, gpus=32)
    assert _decide(tmp_path, snap, job) is None


@pytest.mark.parametrize("state", [None, "COMPLETED", "CANCELLED"])
def test_nodes_held_for_a_large_job_that_ended_are_not_lost(tmp_path: Path,
                                                             state: str | None) -> None:
    # The pass deletes that reservation (step 1, after the binder): a job planned on its nodes
    # keeps them (it was repaired away from nodes about to be free, 10 to 17 jobs a pass).
    snap, job = _snapshot(lpj_priority=50)
    if state is None:
        del snap.jobs[10]
    else:
        lpj = snap.jobs[10]
        snap.jobs[10] = JobInfo(10, lpj.name, lpj.user, state, (), "gpu", 60, None, None,
                                "arnold_10", node_count=4, gpus=32)
    move = _decide(tmp_path, snap, job)
    assert move is None or (move.kind != "repair" and set(move.placement.nodes()) == set(FIRST))
