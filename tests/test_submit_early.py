"""The placement solved before the site lock is kept only on an unchanged cluster, and its log
lines are shown once, only when it is kept (``slurm_arnold.submit.early``)."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from slurm_arnold.errors import InfeasibleError
from slurm_arnold.snapshot.view import ClusterView, offline_cluster
from slurm_arnold.submit.early import solve_early
from slurm_arnold.topology import parse_topology

TOPOLOGY = """SwitchName=l0 Nodes=n[01-04]
SwitchName=l1 Nodes=n[05-08]
SwitchName=s0 Switches=l[0-1]
"""


def _view(free: list[str]) -> ClusterView:
    return offline_cluster(parse_topology(TOPOLOGY), 8, free)


def test_kept_only_where_every_input_is_as_it_was() -> None:
    view = _view([f"n0{i}" for i in range(1, 7)])
    free = set(view.free) - {"n06"}  # one claimed by a pending job's -w
    early = solve_early(view, free, lambda: "answer")
    assert early is not None and early.holds(_view([f"n0{i}" for i in range(1, 7)]), set(free))
    # A node freed, a node taken, a claim dropped, a node's GPUs changed: solved again.
    assert not early.holds(_view([f"n0{i}" for i in range(1, 8)]), set(free))
    assert not early.holds(_view([f"n0{i}" for i in range(1, 6)]), free - {"n06"})
    assert not early.holds(view, set(view.free))
    other = _view([f"n0{i}" for i in range(1, 7)])
    other.nodes["n07"] = replace(other.nodes["n07"], gpus_used=4)
    assert not early.holds(other, set(free))


def test_a_failed_early_solve_leaves_the_decision_to_the_lock() -> None:
    view = _view(["n01"])

    def infeasible() -> str:
        raise InfeasibleError("2 nodes needed, 1 free now")

    assert solve_early(view, set(view.free), infeasible) is None


def test_log_lines_are_held_back_and_shown_once_when_kept(
        caplog: pytest.LogCaptureFixture) -> None:
    view = _view(["n01", "n02"])
    log = logging.getLogger("slurm_arnold.submit.flow")

    def solve() -> int:
        log.info("--align auto: alpha 0.25")
        return 7

    with caplog.at_level(logging.INFO):
        early = solve_early(view, set(view.free), solve)
        assert early is not None and caplog.messages == []
        assert early.take() == 7
    assert caplog.messages == ["--align auto: alpha 0.25"]
