"""The trace-driven simulator and Arnold's reservation policy (issue 7)."""

from __future__ import annotations

import itertools
import json
import math
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from benchmarks.sim import fat_tree
from predictor.swf import JobRecord, read_swf
from slurm_arnold.cli.main import main
from slurm_arnold.errors import InfeasibleError
from slurm_arnold.sim.cluster import SimCluster
from slurm_arnold.sim.engine import Simulation
from slurm_arnold.sim.jobs import build_workload
from slurm_arnold.sim.settings import SimSettings
from slurm_arnold.topology import parse_topology
from tests.test_predictor import KTH, _jobs

KEYS = {"utilization", "mean_wait_h", "bounded_slowdown", "lpj_mean_wait_h", "lpj_p95_wait_h",
        "lpj_mean_weighted_spread", "backfilled_in_reservations", "reserved_idle_node_h",
        "lpj_delay_h_from_mispredictions", "killed_jobs", "jobs", "dropped_jobs",
        "placements_time_limited", "placement_slowest_s"}


_tree = fat_tree


def _record(i: int, submit: int, procs: int, run: int, limit: int, user: str = "u") -> JobRecord:
    return JobRecord(str(i), user, "g", "p", "q", "n", submit, submit, submit + run, None,
                     None, procs, limit, "COMPLETED", 0)


def _sim(records: list[JobRecord], topo: str, *, lpj_gpus: int = 10_000,
         **settings: object) -> Simulation:
    cluster = SimCluster(parse_topology(topo), 8)
    workload = build_workload(records, gpus_per_node=8, gpus_per_proc=8,
                              cluster_gpus=cluster.total_gpus, lpj_gpus=lpj_gpus)
    return Simulation(cluster, workload, SimSettings(**settings))  # type: ignore[arg-type]


def _starts(sim: Simulation) -> list[float | None]:
    return [j.start for j in sim.jobs]


def test_backfill_schedule_of_a_tiny_log_is_known_exactly() -> None:
    # 4 nodes. J2 (all 4 nodes) is planned for t=200, when J1 ends by its limit; J3 ends by
    # its limit before that and backfills at 100; J4 would not, and waits for J2.
    log = [_record(0, 0, 4, 100, 200), _record(1, 10, 2, 50, 100), _record(2, 20, 4, 10, 50),
           _record(3, 30, 1, 30, 60), _record(4, 40, 1, 10, 150)]
    sim = _sim(log, _tree(1, 2, 2), policy="slurm")
    result = sim.run()
    assert _starts(sim) == [0, 100, 150, 100, 160]
    assert [j.end for j in sim.jobs] == [100, 150, 160, 130, 170]
    assert result["mean_wait_h"] == pytest.approx((0 + 90 + 130 + 70 + 120) / 5 / 3600,
                                                  abs=1e-6)
    busy = 4 * 100 + 2 * 50 + 4 * 10 + 30 + 10
    assert result["utilization"] == pytest.approx(busy / (4 * 170), abs=1e-6)


def _reservation_log() -> list[JobRecord]:
    # P0 gives u2 a 5 s history; J0 holds 2 of 4 nodes until 100; the LPJ (4 nodes) gets a
    # reservation expected to start at 100; J2 (u2, predicted 5 s by last2, runs 90 s) is
    # admitted at 20; J3 (u3, no history: predicted its 200 s limit) is refused.
    return [_record(0, 0, 1, 5, 60, "u2"), _record(1, 0, 2, 100, 100, "u0"),
            _record(2, 10, 4, 50, 100, "u1"), _record(3, 20, 1, 90, 200, "u2"),
            _record(4, 30, 1, 10, 200, "u3")]


def test_share_mode_admits_and_the_misprediction_delays_the_lpj() -> None:
    # The reservation mechanism itself: made even though it cannot pay (see below).
    sim = _sim(_reservation_log(), _tree(2, 1, 2), lpj_gpus=32, policy="arnold",
               predictor="last2", mode="share", pay_for_itself=False)
    result = sim.run()
    lpj, admitted, refused = sim.jobs[2], sim.jobs[3], sim.jobs[4]
    assert admitted.start == 20 and admitted.end == 110 and admitted.admitted_to == 0
    assert lpj.start == 110  # waited 10 s for the admitted job that outran its prediction
    assert refused.start == 160  # after the LPJ: it was refused the reserved nodes
    assert result["backfilled_in_reservations"] == 1
    assert result["lpj_delay_h_from_mispredictions"] == pytest.approx(10 / 3600, abs=1e-6)
    assert result["killed_jobs"] == 0
    # PP=4, DP=1: each DP group is one node (spread 1), the pipeline spans both minipods (2).
    assert result["lpj_mean_weighted_spread"] == 1.5
    # Reserved from 10 (all 4 nodes): 2 idle until the admitted job takes one at 20, 1 idle
    # until J1 frees 2 at 100, 3 idle until the LPJ starts at 110.
    assert result["reserved_idle_node_h"] == pytest.approx((2 * 10 + 1 * 80 + 3 * 10) / 3600,
                                                           abs=1e-6)


def test_shrink_mode_ends_the_mispredicted_job_and_the_lpj_starts_on_time() -> None:
    sim = _sim(_reservation_log(), _tree(2, 1, 2), lpj_gpus=32, policy="arnold",
               predictor="last2", mode="shrink", pay_for_itself=False)
    result = sim.run()
    lpj, admitted = sim.jobs[2], sim.jobs[3]
    assert admitted.start == 20 and admitted.end == 100 and admitted.killed
    assert lpj.start == 100
    assert result["killed_jobs"] == 1 and result["lpj_delay_h_from_mispredictions"] == 0
    assert result["reserved_idle_node_h"] == pytest.approx((2 * 10 + 1 * 80) / 3600, abs=1e-6)
    slurm = _sim(_reservation_log(), _tree(2, 1, 2), lpj_gpus=32, policy="slurm").run()
    assert slurm["reserved_idle_node_h"] == 0


@pytest.mark.parametrize(("j1_limit", "reserved"), [(100, False), (1000, True)])
def test_by_default_a_reservation_is_made_only_where_it_beats_slurms_plan(
        j1_limit: int, reserved: bool) -> None:
    # J1's limit decides Slurm's plan for the LPJ (J1's end by its limit); the oracle expects
    # the LPJ at 100. Limit 100: reserving saves nothing, so the pool is not drained and J4
    # waits behind the LPJ as under Slurm. Limit 1000: it saves 4 nodes x 900 s against 170
    # idle node-seconds, so it is made and J4 (10 s) is admitted into it.
    log = [_record(0, 0, 1, 5, 60, "u2"), _record(1, 0, 2, 100, j1_limit, "u0"),
           _record(2, 10, 4, 50, 100, "u1"), _record(3, 20, 1, 90, 200, "u2"),
           _record(4, 30, 1, 10, 200, "u3")]
    sim = _sim(log, _tree(2, 1, 2), lpj_gpus=32, policy="arnold", predictor="oracle",
               mode="share")
    result = sim.run()
    assert sim.jobs[2].start == 100
    assert (result["reserved_idle_node_h"] > 0) == reserved
    assert result["backfilled_in_reservations"] == int(reserved)
    assert sim.jobs[4].start == (30 if reserved else 150)
    forced = _sim(log, _tree(2, 1, 2), lpj_gpus=32, policy="arnold", predictor="oracle",
                  mode="share", pay_for_itself=False).run()
    assert forced["reserved_idle_node_h"] > 0


def test_a_reservation_whose_start_slipped_moves_to_nodes_that_drain_sooner() -> None:
    # One leaf of 4 nodes (every placement has the same spread). Histories give last2
    # predictions: A 100 s (it runs 1,900), C 300, D 900; E has none (its 1,100 s limit).
    # At 1,010 the LPJ (2 nodes) is reserved on A's and C's nodes, expected at 1,300. A
    # outruns its prediction and is then expected to run to its limit (3,000): when C ends
    # at 1,300 the reservation moves to C and D (drained at 1,900). Kept on A, its start would
    # wait for A or E (2,000 at the earliest), and F would take D's node at 1,900.
    log = [_record(0, 0, 1, 100, 200, "uA"), _record(1, 0, 1, 300, 400, "uC"),
           _record(2, 0, 1, 900, 1000, "uD"),
           _record(3, 1000, 1, 1900, 2000, "uA"), _record(4, 1000, 1, 300, 400, "uC"),
           _record(5, 1000, 1, 900, 1000, "uD"), _record(6, 1000, 1, 1000, 1100, "uE"),
           _record(7, 1005, 1, 2000, 3000, "uF"), _record(8, 1010, 2, 100, 200, "uL")]
    sim = _sim(log, _tree(1, 1, 4), lpj_gpus=16, policy="arnold", predictor="last2",
               mode="share")
    result = sim.run()
    lpj, f = sim.jobs[8], sim.jobs[7]
    assert result["replans"] == 1
    assert lpj.start == 1900 and sorted(lpj.node_ids) == sorted(
        sim.jobs[4].node_ids + sim.jobs[5].node_ids)
    assert f.start == 2000


def test_with_a_starvation_bound_an_lpj_keeps_its_place_against_the_lpjs_behind_it() -> None:
    # 8 nodes; J0 holds 2 of them until 200,000 s. B (all 8 nodes) is not imminent (beyond the
    # 2 h horizon), so it waits unreserved, planned at 200,000. L1 (3 nodes, 250,000 s)
    # comes 10 s after it and may pass it (B is young): B is pushed to 250,020. L2 comes
    # 25 h after B, which has by then waited more than the day's bound: L2 may not take B's
    # planned nodes and runs after B; without the bound it pushes B to L2's end.
    log = [_record(0, 0, 2, 200_000, 200_000), _record(1, 10, 8, 100, 1_000),
           _record(2, 20, 3, 250_000, 250_000), _record(3, 90_010, 3, 250_000, 250_000)]
    sim = _sim(log, _tree(1, 2, 4), lpj_gpus=24, policy="arnold", predictor="requested",
               lpj_starved_h=24.0)
    sim.run()
    b, l1, l2 = sim.jobs[1], sim.jobs[2], sim.jobs[3]
    assert b.lpj and l1.lpj and l2.lpj
    assert l1.start == 20
    assert b.start == 250_020 and l2.start == 250_120
    # Without the day's bound L2 passes B too (B's first plan, 200,000, is still ahead).
    unbounded = _sim(log, _tree(1, 2, 4), lpj_gpus=24, policy="arnold", predictor="requested")
    unbounded.run()
    assert unbounded.jobs[3].start == 90_010 and unbounded.jobs[1].start == 340_010


def test_an_lpj_past_its_first_planned_start_keeps_its_place_against_the_lpjs_behind_it(
        ) -> None:
    # 8 nodes; J0 holds 2 of them until 200,000 s. B (all 8 nodes) is not imminent, so it
    # waits unreserved; its first plan (by limits, Slurm's promise) starts at 200,000. L1 (3
    # nodes) comes before that and may pass it: B is pushed to 250,020. L2 comes at 200,010,
    # when B is past its first plan: L2 may not take B's planned nodes and runs after B.
    # Without the rule it pushes B to L2's end.
    log = [_record(0, 0, 2, 200_000, 200_000), _record(1, 10, 8, 100, 1_000),
           _record(2, 20, 3, 250_000, 250_000), _record(3, 200_010, 3, 250_000, 250_000)]
    sim = _sim(log, _tree(1, 2, 4), lpj_gpus=24, policy="arnold", predictor="requested")
    sim.run()
    b, l1, l2 = sim.jobs[1], sim.jobs[2], sim.jobs[3]
    assert b.lpj and l1.lpj and l2.lpj
    assert b.first_plan == 200_000
    assert l1.start == 20
    assert b.start == 250_020 and l2.start == 250_120
    unbounded = _sim(log, _tree(1, 2, 4), lpj_gpus=24, policy="arnold", predictor="requested",
                     lpj_starved_past_plan=False)
    unbounded.run()
    assert unbounded.jobs[3].start == 200_010 and unbounded.jobs[1].start == 450_010


def test_plans_past_reservations_give_a_job_behind_a_reservation_a_plan_to_protect() -> None:
    # 8 nodes in two leaves. A (4 nodes, to 1,000), B (2, to 3,000), C (2, to 500). R (LPJ,
    # 4 nodes) is reserved on A's leaf at 10, to start at 1,000. Big (LPJ, 7 nodes) comes at
    # 20: the reservation leaves it too few nodes to reserve, so it waits planned. S (2 nodes,
    # limit 5,000) could take C's nodes at 500. With reserved nodes free once R has run to its
    # limit (2,000), Big's plan (3,000, when B ends) holds C's nodes against S: Big starts at
    # 3,000, S after it. Counted never free (the default), Big has no plan while R is
    # reserved: S starts at 500 and Big waits for it until 5,500.
    log = [_record(0, 0, 4, 1_000, 1_000), _record(1, 0, 2, 3_000, 3_000),
           _record(2, 0, 2, 500, 500), _record(3, 10, 4, 1_000, 1_000),
           _record(4, 20, 7, 100, 1_000), _record(5, 30, 2, 5_000, 5_000)]
    past = _sim(log, _tree(1, 2, 4), lpj_gpus=32, policy="arnold", predictor="requested",
                plans_past_reservations=True)
    past.run()
    r, big, small = past.jobs[3], past.jobs[4], past.jobs[5]
    assert r.lpj and big.lpj and not small.lpj
    assert r.start == 1_000 and past.next_rid == 1  # R's reservation, the only one
    assert big.start == 3_000 and small.start == 3_100
    never = _sim(log, _tree(1, 2, 4), lpj_gpus=32, policy="arnold", predictor="requested")
    never.run()
    assert never.jobs[3].start == 1_000
    assert never.jobs[5].start == 500 and never.jobs[4].start == 5_500


def test_lpjs_respecting_lpj_plans_keep_a_blocked_lpj_from_being_passed_by_one_behind() -> None:
    # 8 nodes in two leaves; an LPJ is 3 nodes or more. A (4 nodes, to 1,000) and B (1 node, to
    # 2,000) run. Big (LPJ, 7 nodes, 100 s) comes at 10 and is planned for 1,000 on A's nodes
    # and the 3 free ones (a reservation would start it no sooner, so it has none). L (LPJ,
    # 3 nodes, 5,000 s) comes at 20: the 3 free nodes would fit it now. With the setting they
    # are Big's planned nodes and L would run past 1,000, so L neither starts nor reserves
    # there and waits until Big ends at 1,100; without it (the default) L starts at once and
    # Big waits for it until 5,020.
    log = [_record(0, 0, 4, 1_000, 1_000), _record(1, 0, 1, 2_000, 2_000),
           _record(2, 10, 7, 100, 1_000), _record(3, 20, 3, 5_000, 5_000)]
    kept = _sim(log, _tree(1, 2, 4), lpj_gpus=24, policy="arnold", predictor="requested",
                lpjs_respect_lpj_plans=True, plans_past_reservations=True)
    kept.run()
    big, late = kept.jobs[2], kept.jobs[3]
    assert big.lpj and late.lpj
    assert big.start == 1_000 and late.start == 1_100
    passed = _sim(log, _tree(1, 2, 4), lpj_gpus=24, policy="arnold", predictor="requested",
                  plans_past_reservations=True)
    passed.run()
    assert passed.next_rid == 0  # Big never reserved: nothing but the plan could hold it
    assert passed.jobs[3].start == 20 and passed.jobs[2].start == 5_020


def test_a_replanned_reservation_keeps_off_the_nodes_planned_for_a_blocked_lpj_ahead() -> None:
    # 12 nodes in three leaves. A (4 nodes, to 1,000), B (4, to 1,500) and C (1, to 9,000)
    # run; 3 nodes are free. Big (LPJ, 7 nodes, 100 s) is planned for 1,000 on A's nodes and
    # the free three. L (LPJ, 3 nodes, 5,000 s) may not take those, so it reserves 3 of B's
    # (to start at 1,500). S (1 node, 10 s) arrives at 30. A replan that ignored Big's plan
    # would move L onto the free three at 30 and start it there, pushing Big to 1,500 (what
    # the simulator did before: a replan honoured none of the rules a new reservation does).
    # Replanned at L's turn, outside Big's plan, L stays off them: Big starts at 1,000 and
    # L on Big's nodes once it ends, before its reservation would have started it.
    log = [_record(0, 0, 4, 1_000, 1_000), _record(1, 0, 4, 1_500, 1_500),
           _record(2, 0, 1, 9_000, 9_000), _record(3, 10, 7, 100, 1_000),
           _record(4, 20, 3, 5_000, 5_000), _record(5, 30, 1, 10, 10)]
    sim = _sim(log, _tree(1, 3, 4), lpj_gpus=24, policy="arnold", predictor="requested",
               lpjs_respect_lpj_plans=True, plans_past_reservations=True)
    sim.run()
    big, late, small = sim.jobs[3], sim.jobs[4], sim.jobs[5]
    assert big.start == 1_000 and late.start == 1_100 and small.start == 30
    assert set(late.node_ids) <= set(big.node_ids)


def test_a_reservation_moved_beside_a_plan_ahead_may_keep_its_own_nodes() -> None:
    # 8 nodes in two leaves. L (LPJ, 3 nodes) reserved nodes 0-2, expected at 1,000. At 10
    # node 0 and nodes 3-4 are free: a move can start it now. A blocked LPJ ahead is planned
    # on 0-2 and 5-7, past L (plans past reservations count L's run there first), so the move
    # is judged over L's own nodes and the unplanned 3-4. Before, the new reservation was
    # then barred from L's own nodes too: two nodes were left, L lost its reservation.
    log = [_record(0, 0, 1, 10, 10), _record(1, 0, 2, 1_000, 1_000),
           _record(2, 0, 2, 10, 2_000), _record(3, 0, 3, 5_000, 5_000),
           _record(4, 0, 3, 500, 500)]
    sim = _sim(log, _tree(1, 2, 4), lpj_gpus=24, policy="arnold", predictor="requested",
               pay_for_itself=False, reserve_horizon_h=1.0)
    jobs = sim.jobs
    for job in jobs:
        sim._submit(job)
    for job, nodes in zip(jobs[:4], ([0], [1, 2], [3, 4], [5, 6, 7]), strict=True):
        sim._start(job, nodes)
    late = jobs[4]
    assert late.lpj and sim._reserve(late)
    res = sim.reservations[sim.res_of_job[late.index]]
    assert sorted(res.nodes.tolist()) == [0, 1, 2] and res.earliest == 1_000
    sim.now = 10.0
    for job in jobs[0], jobs[2]:
        sim._end(job)
    planned = np.zeros(sim.c.n, dtype=bool)
    planned[[0, 1, 2, 5, 6, 7]] = True
    assert sim._replan(res, sim._drain(), planned)
    moved = sim.reservations[sim.res_of_job[late.index]]
    assert sim.replans == 1 and sorted(moved.nodes.tolist()) == [0, 3, 4]
    assert sim._expected_start(moved, sim._drain()) == 10


@pytest.mark.parametrize(("limit", "run", "predictor", "cost", "late_start", "big_start"), [
    # L may run to 5,000 s past Big's planned start: 7 nodes x 4,020 s of delay against
    # 3 nodes x 1,980 s saved (its turn: 2,000, after Big's plan by limits and B's node).
    (5_000, 5_000, "requested", "limits", 1_100, 1_000),
    # A 1,200 s limit delays Big 220 s on 7 nodes, less than L saves: it passes.
    (1_200, 1_200, "requested", "limits", 20, 1_220),
    # By its prediction (the oracle's 200 s) L ends before Big's planned start: it passes,
    # and since it ends in time Big still starts at 1,000. By its limit it would not.
    (5_000, 200, "oracle", "predictions", 20, 1_000),
    (5_000, 200, "oracle", "limits", 1_100, 1_000),
    # Expected delay: 0.9 x 0 s by the prediction + 0.1 x 4,020 s by the limit, on 7 nodes,
    # is less than the 3 x 1,980 node-s saved; with a 20,000 s limit (0.1 x 19,020 s) it is
    # more, so L keeps behind Big, where by its prediction alone it would pass.
    (5_000, 200, "oracle", "expected", 20, 1_000),
    (20_000, 200, "oracle", "expected", 1_100, 1_000),
    (20_000, 200, "oracle", "predictions", 20, 1_000),
])
def test_an_lpj_passes_a_blocked_lpj_only_when_the_jump_pays_for_itself(
        limit: int, run: int, predictor: str, cost: str, late_start: int,
        big_start: int) -> None:
    # The scene of the test above: A (4 nodes, to 1,000) and B (1 node, to 2,000) run; Big
    # (LPJ, 7 nodes, 100 s, limit 1,000) is planned for 1,000 on A's nodes and the 3 free
    # ones; L (LPJ, 3 nodes) comes at 20 and the 3 free nodes would fit it now.
    log = [_record(0, 0, 4, 1_000, 1_000), _record(1, 0, 1, 2_000, 2_000),
           _record(2, 10, 7, 100, 1_000), _record(3, 20, 3, run, limit)]
    sim = _sim(log, _tree(1, 2, 4), lpj_gpus=24, policy="arnold", predictor=predictor,
               lpj_jumps_pay=cost, plans_past_reservations=True)
    sim.run()
    big, late = sim.jobs[2], sim.jobs[3]
    assert big.lpj and late.lpj
    assert late.start == late_start and big.start == big_start


@pytest.mark.parametrize(("head_binds", "limit", "late_start", "big_start"), [
    # Off, L takes the 3 free nodes at 20 and Big, planned for 1,000, waits for L's end.
    (False, 5_000, 20, 5_020),
    # On, Big is the LPJs' head: L may not take its planned nodes ...
    (True, 5_000, 1_100, 1_000),
    # ... unless it ends, by its limit, before Big's planned start.
    (True, 900, 20, 1_000),
])
def test_the_first_blocked_lpj_keeps_its_place_when_the_head_binds(
        head_binds: bool, limit: int, late_start: int, big_start: int) -> None:
    # The scene of the jump tests: A (4 nodes, to 1,000) and B (1 node, to 2,000) run; Big
    # (LPJ, 7 nodes) is planned for 1,000 on A's nodes and the 3 free ones; L (LPJ, 3
    # nodes) comes at 20 and would fit the free ones now.
    log = [_record(0, 0, 4, 1_000, 1_000), _record(1, 0, 1, 2_000, 2_000),
           _record(2, 10, 7, 100, 1_000), _record(3, 20, 3, limit, limit)]
    sim = _sim(log, _tree(1, 2, 4), lpj_gpus=24, policy="arnold", predictor="requested",
               lpj_head_binds=head_binds)
    sim.run()
    big, late = sim.jobs[2], sim.jobs[3]
    assert late.start == late_start and big.start == big_start


@pytest.mark.parametrize(("shadow", "predictor", "run", "late_start", "big_start"), [
    # Off, L takes the 3 free nodes at 20 and Big, planned for 1,000, waits for L's end.
    ("off", "oracle", 5_000, 20, 5_020),
    # On, Big's shadow is 1,000 (A's 4 nodes and the 3 free ones): L, predicted to run
    # past it, may not take the free nodes Big needs then ...
    ("predictions", "oracle", 5_000, 1_100, 1_000),
    # ... but ends in time by its prediction (the oracle's 200 s, limit 5,000): it passes.
    ("predictions", "oracle", 200, 20, 1_000),
    # Judged by its limit, the same L runs past the shadow: it keeps behind Big ...
    ("limits", "oracle", 200, 1_100, 1_000),
    # ... as it does when its prediction is its limit (requested).
    ("predictions", "requested", 200, 1_100, 1_000),
])
def test_an_lpj_behind_keeps_out_of_the_head_lpjs_shadow(
        shadow: str, predictor: str, run: int, late_start: int, big_start: int) -> None:
    # The scene of the head-binds test: A (4 nodes, to 1,000) and B (1 node, to 2,000) run;
    # Big (LPJ, 7 nodes) is blocked; L (LPJ, 3 nodes, limit 5,000) comes at 20.
    log = [_record(0, 0, 4, 1_000, 1_000), _record(1, 0, 1, 2_000, 2_000),
           _record(2, 10, 7, 100, 1_000), _record(3, 20, 3, run, 5_000)]
    sim = _sim(log, _tree(1, 2, 4), lpj_gpus=24, policy="arnold", predictor=predictor,
               lpj_head_shadow=shadow)
    sim.run()
    big, late = sim.jobs[2], sim.jobs[3]
    assert big.lpj and late.lpj
    assert late.start == late_start and big.start == big_start


@pytest.mark.parametrize(("nodes", "late_start"), [
    # Big needs 7 of the 8 nodes by 1,000: A's 4 and 3 of the 4 free ones. The fourth is
    # one Big will not need: a 1-node LPJ running long may take it now ...
    (1, 20),
    # ... a 2-node one would take a node Big needs at 1,000: it waits for Big's end.
    (2, 1_100),
])
def test_the_head_lpjs_shadow_leaves_the_nodes_it_will_not_need_open(
        nodes: int, late_start: int) -> None:
    log = [_record(0, 0, 4, 1_000, 1_000), _record(1, 10, 7, 100, 1_000),
           _record(2, 20, nodes, 5_000, 5_000)]
    sim = _sim(log, _tree(1, 2, 4), lpj_gpus=8, policy="arnold", predictor="requested",
               lpj_head_shadow="limits")
    sim.run()
    big, late = sim.jobs[1], sim.jobs[2]
    assert big.lpj and late.lpj
    assert late.start == late_start and big.start == 1_000


@pytest.mark.parametrize(("keeps", "late_start"), [
    # X (4 nodes, to 10) and A (4 nodes, to 1,000) fill the two leaves; once X ends, Big
    # (7 nodes) can have all 8 by 1,000. Busy-first keeps A's 4 and 3 of X's idle ones: L
    # (1 node, running long) takes the fourth idle node at once ...
    ("busy-first", 30),
    # ... tree fit keeps X's whole leaf and 3 of A's nodes, as Big's backfill plan would:
    # L waits for A's fourth node, at 1,000.
    ("tree-fit", 1_000),
])
def test_the_head_lpjs_shadow_keeps_the_nodes_its_setting_names(
        keeps: str, late_start: int) -> None:
    log = [_record(0, 0, 4, 10, 10), _record(1, 0, 4, 1_000, 1_000),
           _record(2, 20, 7, 100, 1_000), _record(3, 30, 1, 5_000, 5_000)]
    sim = _sim(log, _tree(1, 2, 4), lpj_gpus=8, policy="arnold", predictor="requested",
               lpj_head_shadow="limits", lpj_head_shadow_nodes=keeps)
    sim.run()
    x, a, big, late = sim.jobs
    assert sorted(x.node_ids) == [0, 1, 2, 3] and sorted(a.node_ids) == [4, 5, 6, 7]
    assert big.start == 1_000 and late.start == late_start


def test_an_unknown_jump_cost_is_refused() -> None:
    with pytest.raises(InfeasibleError, match="lpj_jumps_pay 'free'; use off, limits"):
        _sim([_record(0, 0, 1, 10, 10)], _tree(1, 1, 2), policy="arnold", lpj_jumps_pay="free")
    with pytest.raises(InfeasibleError, match="lpj_head_shadow 'on'; use off, limits"):
        _sim([_record(0, 0, 1, 10, 10)], _tree(1, 1, 2), policy="arnold", lpj_head_shadow="on")
    with pytest.raises(InfeasibleError, match="lpj_head_shadow_nodes 'idle'; use busy-first"):
        _sim([_record(0, 0, 1, 10, 10)], _tree(1, 1, 2), policy="arnold",
             lpj_head_shadow_nodes="idle")


def _check_conservation(sim: Simulation, result: dict[str, object]) -> None:
    g = sim.c.g
    seen = set()
    events: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for index, nodes, gpus_each, start, end in sim.log:
        assert index not in seen, f"job {index} started twice"
        seen.add(index)
        job = sim.jobs[index]
        assert start >= job.submit and end >= start
        for node in nodes:
            events[node].append((end, -gpus_each))
            events[node].append((start, gpus_each))
    assert seen == {j.index for j in sim.jobs}
    for node, changes in events.items():
        used = 0
        for _, delta in sorted(changes):  # at equal times releases (negative) come first
            used += delta
            assert used <= g, f"node {node} oversubscribed"
    assert 0 < float(result["utilization"]) <= 1.0  # type: ignore[arg-type]


@pytest.mark.parametrize("policy,predictor,mode", [("slurm", "requested", "share"),
                                                   ("arnold", "oracle", "share"),
                                                   ("arnold", "last2", "shrink"),
                                                   ("arnold", "model_q", "share")])
def test_conservation_on_a_synthetic_log(policy: str, predictor: str, mode: str) -> None:
    # The synthetic log with submits compressed 8x (a busier cluster), run times kept.
    records = [JobRecord(j.job_id, j.user, j.group, j.partition, j.qos, j.name, j.submit // 8,
                         j.submit // 8, j.submit // 8 + ((j.end or 0) - (j.start or 0)), None,
                         None, j.procs, j.time_limit, j.state, 0)
               for j in _jobs(1500, seed=3)]
    sim = _sim(records, _tree(2, 2, 4), lpj_gpus=64, policy=policy, predictor=predictor,
               mode=mode, placement="best-fit")
    result = sim.run()
    _check_conservation(sim, result)
    assert set(result) >= KEYS
    if policy == "arnold":
        assert result["lpj_mean_weighted_spread"] > 0


def test_no_predictor_sees_a_job_before_it_ends() -> None:
    records = [JobRecord(j.job_id, j.user, "g", "p", "q", "n", j.submit, j.submit,
                         j.submit + ((j.end or 0) - (j.start or 0)), None, None, j.procs,
                         j.time_limit, "COMPLETED", 0) for j in _jobs(2500, seed=5)]
    sim = _sim(records, _tree(2, 2, 4), lpj_gpus=64, policy="arnold", predictor="model_q",
               placement="best-fit")
    seen_at: dict[int, float] = {}
    original = sim.pred.observe_end

    def spy(job):  # type: ignore[no-untyped-def]
        assert job.end is not None and job.end <= sim.now, "a runtime was learnt early"
        seen_at[job.index] = sim.now
        original(job)

    sim.pred.observe_end = spy  # type: ignore[method-assign]
    sim.run()
    assert sim.pred.retrains >= 2
    for now, latest_end in sim.pred.audit:
        assert latest_end <= now
    assert len(seen_at) == len(sim.jobs)


def _sim_args(tmp_path: Path, jobs: int, *, gap: int, run: Callable[[int], int],
              tail: str = "") -> list[str]:
    """``arnold sim`` on a 16-node tree and an SWF log of ``jobs`` jobs of 1-4 processors
    (8 GPUs each), job i submitted at i x ``gap`` s and running ``run(i)`` s; ``tail`` is
    appended to the log as is."""
    topo = tmp_path / "topology.conf"
    topo.write_text(_tree(2, 2, 4))
    log = tmp_path / "log.swf"
    log.write_text("\n".join(
        f"{i} {i * gap} 0 {run(i)} {1 + i % 4} -1 -1 {1 + i % 4} 600 -1 1 {i % 3} 1 -1 1 "
        "-1 -1 -1" for i in range(jobs)) + "\n" + tail)
    return ["sim", "--swf", str(log), "--topology", str(topo), "--gpus-per-proc", "8"]


def test_sim_command_json_keys(tmp_path: Path) -> None:
    args = _sim_args(tmp_path, 60, gap=50, run=lambda i: 100 + i, tail="9 9 9\n")
    for policy in ("slurm", "arnold"):
        result = CliRunner().invoke(main, [*args, "--policy", policy, "--lpj-gpus", "24",
                                           "--placement", "best-fit", "--json"])
        assert result.exit_code == 0, result.output
        doc = json.loads(result.stdout)
        assert set(doc) >= KEYS and doc["jobs"] == 60 and doc["n_bad_lines"] == 1
        assert doc["predictor"] == ("model_q" if policy == "arnold" else "requested")


def test_sim_replays_the_slice_skip_and_max_jobs_name(tmp_path: Path) -> None:
    import csv

    args = [*_sim_args(tmp_path, 60, gap=50, run=lambda i: 100 + i, tail="9 9 9\n"),
            "--policy", "slurm"]
    out = tmp_path / "jobs.csv"
    result = CliRunner().invoke(main, [*args, "--skip-jobs", "20", "--max-jobs", "25",
                                       "--jobs-csv", str(out), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["jobs"] == 25
    assert [r["job_id"] for r in csv.DictReader(out.open())] == [str(i) for i in range(20, 45)]
    tail = CliRunner().invoke(main, [*args, "--skip-jobs", "50", "--json"])
    assert tail.exit_code == 0 and json.loads(tail.stdout)["jobs"] == 10
    empty = CliRunner().invoke(main, [*args, "--skip-jobs", "60"])
    assert empty.exit_code == 2 and "--skip-jobs 60 leaves no job of the log's 60" in empty.output
    assert "Traceback" not in empty.output


def test_sim_replays_the_same_slice_as_the_bench(tmp_path: Path) -> None:
    """`arnold sim --skip-jobs N --max-jobs M` on a shared log gives the metrics of the
    bench's own replay of that slice (benchmarks.sim.read_log + run_one), so a figure quoted
    from a bench slice can be rerun, and traced, with `arnold sim`."""
    from benchmarks.logs import LOGS
    from benchmarks.sim import read_log, run_one

    if not KTH.exists():
        pytest.skip(f"{KTH} is absent (the shared data is not beside this checkout)")
    setup = next(s for s in LOGS if s.name == "KTH")
    topo = tmp_path / "topology.conf"
    topo.write_text(fat_tree(setup.pods, setup.leaves, setup.nodes))
    skip, count = 3_000, 400
    bench = run_one(read_log(KTH.parent, setup, count, skip), setup, "arnold", "requested",
                    "share")
    result = CliRunner().invoke(main, [
        "sim", "--swf", str(KTH), "--topology", str(topo), "--gpus-per-proc",
        str(setup.gpus_per_proc), "--policy", "arnold", "--predictor", "requested",
        "--skip-jobs", str(skip), "--max-jobs", str(count), "--json"])
    assert result.exit_code == 0, result.output
    ours = json.loads(result.stdout)
    assert ours["jobs"] == bench["jobs"] == count
    # The slice has large jobs and reservations: the LPJ keys are compared too.
    assert ours["lpjs"] > 0 and ours["reservations"] > 0
    for key in ("mean_wait_h", "lpj_mean_wait_h", "lpj_mean_weighted_spread", "utilization",
                "reserved_idle_node_h", "reservations", "backfilled_in_reservations"):
        assert ours[key] == bench[key], key


def test_sim_jobs_csv_lists_every_job_and_agrees_with_the_means(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import csv

    # A busy slice: jobs every 20 s that run 300 s, so many of them wait.
    args = _sim_args(tmp_path, 80, gap=20, run=lambda i: 300)
    out = tmp_path / "jobs.csv"
    result = CliRunner().invoke(main, [*args, "--policy", "arnold", "--lpj-gpus", "24",
                                       "--placement", "best-fit", "--predictor", "requested",
                                       "--jobs-csv", str(out), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    rows = list(csv.DictReader(out.open()))
    assert [r["job_id"] for r in rows] == [str(i) for i in range(80)]
    waits = [float(r["wait_h"]) for r in rows]
    assert max(waits) > 0  # the slice is busy enough that some wait
    assert sum(waits) / len(waits) == pytest.approx(doc["mean_wait_h"], abs=1e-3)
    lpj = [w for w, r in zip(waits, rows, strict=True) if r["lpj"] == "1"]
    assert lpj and sum(lpj) / len(lpj) == pytest.approx(doc["lpj_mean_wait_h"], abs=1e-3)
    for r in rows:
        assert float(r["start"]) - float(r["submit"]) == pytest.approx(
            float(r["wait_h"]) * 3600, abs=1.0)
        assert float(r["end"]) >= float(r["start"])
    # A path that cannot be written fails before the replay, not after it.
    def no_replay(self: object) -> None:
        raise AssertionError("the replay ran before the path was checked")

    monkeypatch.setattr(Simulation, "run", no_replay)
    bad = CliRunner().invoke(main, [*args, "--policy", "slurm",
                                    "--jobs-csv", str(tmp_path / "nowhere" / "jobs.csv")])
    assert bad.exit_code == 1 and "--jobs-csv" in bad.output
    assert "Traceback" not in bad.output and "replay ran" not in bad.output


def test_sim_set_reaches_the_replay_and_refuses_what_it_cannot_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = [*_sim_args(tmp_path, 40, gap=20, run=lambda i: 300), "--policy", "arnold",
            "--lpj-gpus", "24", "--placement", "best-fit", "--predictor", "requested"]
    seen: list[SimSettings] = []
    replay = Simulation.run

    def spy(self: Simulation) -> dict[str, object]:
        seen.append(self.s)
        return replay(self)

    monkeypatch.setattr(Simulation, "run", spy)
    ok = CliRunner().invoke(main, [*args, "--set", "lpj_jumps_pay=expected",
                                   "--set", "plans_past_reservations=on",
                                   "--set", "lpj_starved_h=inf", "--set", "idle_share=0.5",
                                   "--set", "plan_ahead=3", "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["jobs"] == 40
    (s,) = seen
    assert (s.lpj_jumps_pay, s.plans_past_reservations, s.lpj_starved_h, s.idle_share,
            s.plan_ahead, s.max_reservations) == ("expected", True, math.inf, 0.5, 3, 4)
    for setting, problem in [("lpj_jumps_pay=free", "use off, limits, predictions, expected"),
                             ("lpj_head_shadow=on", "use off, limits, predictions"),
                             ("lpj_head_shadow_nodes=idle", "use busy-first, tree-fit"),
                             ("plans_past_reservations=maybe", "takes true or false"),
                             ("plan_ahead=2.5", "takes an integer"),
                             ("idle_share=nan", "0 or more"), ("idle_share=-1", "0 or more"),
                             ("quantile=1", "between 0 and 1"), ("alpha=1.5", "in [0, 1]"),
                             ("policy=slurm", "use --policy"), ("horizon=3", "unknown setting"),
                             ("lpj_starved_h", "is not KEY=VALUE")]:
        bad = CliRunner().invoke(main, [*args, "--set", setting])
        assert bad.exit_code == 2 and problem in bad.output, (setting, bad.output)
        assert "Traceback" not in bad.output
    assert len(seen) == 1  # no refused setting reached a replay


def test_slurm_vs_arnold_on_a_kth_slice() -> None:
    if not KTH.exists():
        pytest.skip(f"{KTH} is absent (the shared data is not beside this checkout)")
    records = [r for r in read_swf(KTH) if isinstance(r, JobRecord)][:3000]
    topo = _tree(4, 4, 7)
    base = _sim(records, topo, lpj_gpus=256, policy="slurm").run()
    ours = _sim(records, topo, lpj_gpus=256, policy="arnold", predictor="oracle",
                placement="mip").run()
    assert ours["lpj_mean_weighted_spread"] < base["lpj_mean_weighted_spread"]
    # Node limits, not the machine's load, decided every placement of the replay.
    assert ours["placements_solved"] > 0 and ours["placement_slowest_s"] > 0
    assert ours["placements_time_limited"] == 0


def test_bench_sim_quick() -> None:
    if not KTH.exists():
        pytest.skip(f"{KTH} is absent (the shared data is not beside this checkout)")
    result = CliRunner().invoke(main, ["bench", "sim", "--quick", "--json"])
    assert result.exit_code == 0, result.output
    runs = json.loads(result.stdout)["runs"]
    assert "KTH" in runs and len(runs["KTH"]) == 3
    for rows in runs.values():
        assert [r["policy"] for r in rows] == ["slurm", "arnold", "arnold"]
        assert all(set(r) >= KEYS for r in rows)


def test_placement_memo_reuses_a_pattern_on_other_nodes_with_the_same_spread() -> None:
    """A pool that is another pool with leaves and minipods relabelled gets the remembered
    layout on its own nodes, with the spreads a fresh solve gives; a different pattern is
    solved anew."""
    from slurm_arnold.placement import JobShape, place
    from slurm_arnold.placement.plan import measure
    from slurm_arnold.sim.memo import PlacementMemo

    topo = parse_topology(_tree(3, 3, 4))
    shape = JobShape(8, 2, 6, 8)  # 12 nodes
    memo = PlacementMemo(topo, algo="mip", alpha=0.5, time_limit=5.0)
    nodes = topo.nodes  # n00..n35: pod p holds n[12p, 12p+11], leaves of 4
    first = [nodes[i] for i in (0, 1, 2, 4, 5, 12, 13, 14, 15, 16, 24, 25, 26, 27)]
    # Leaf counts (3,2) (4,1) (4) by minipod; here (4) (3,2) (4,1), other leaves.
    second = [nodes[i] for i in (32, 33, 34, 35, 28, 8, 9, 10, 11, 20, 21, 22, 12, 13)]
    a = memo.place(sorted(first), shape)
    b = memo.place(sorted(second), shape)
    assert (memo.misses, memo.hits) == (1, 1)
    assert set(b.nodes()) <= set(second) and len(set(b.nodes())) == shape.nodes
    fresh = place(topo, second, shape, algo="mip", alpha=0.5, time_limit=5.0)
    assert b.metrics == a.metrics == fresh.metrics
    assert measure(b.cells, shape, topo, 0.5) == b.metrics
    memo.place(sorted([*first[:-1], nodes[3]]), shape)  # now (4,2) (4,1) (3)
    assert memo.misses == 2
    assert memo.slowest_s >= a.solve_seconds > 0 and memo.time_limited == 0


def test_start_order_agreement_counts_jobs_and_pairs() -> None:
    from benchmarks.fidelity import agreement

    sim = {"a": 0.0, "b": 10.0, "c": 20.0, "d": 21.0}
    # c and d are within the tolerance in the sim: their live order does not count; b and c
    # swap live, so both are out of order.
    live = {"a": 1.0, "b": 30.0, "c": 25.0, "d": 24.0}
    out = agreement(sim, live, tolerance=3.0)
    assert out["jobs"] == 4 and out["ordered_pairs"] == 5
    assert out["in_order_fraction"] == 0.25  # only a
    # live order a, d, c, b: sim starts 0, 21, 20, 10: the longest chain a, d, c (20 >= 21 - 3)
    assert out["same_order_fraction"] == 0.75
    # b-c and b-d disagree; a-b, a-c, a-d agree
    assert out["pair_agreement"] == 0.6


def _fed_predictor(name: str, jobs: int, per_day: int) -> tuple[object, list[int]]:
    """An online predictor fed ``jobs`` synthetic jobs that end ``per_day`` a day; the
    retrain count after each simulated day."""
    from slurm_arnold.sim.predictors import OnlinePredictor

    records = _jobs(jobs, seed=11)
    workload = build_workload(records, gpus_per_node=8, gpus_per_proc=8, cluster_gpus=10**6,
                              lpj_gpus=10**6)
    pred = OnlinePredictor(name)
    counts = []
    for i, job in enumerate(workload.jobs):
        day = i // per_day
        job.start = day * 86400.0
        job.end = job.start + job.runtime
        pred.observe_submit(job, user_active=0, active=0, running=0)
        job.predicted = pred.predict(job)  # as the engine does when a job starts
        pred.observe_end(job)
        if (i + 1) % per_day == 0:
            pred.maybe_retrain((day + 1) * 86400.0)
            counts.append(pred.retrains)
    return pred, counts


def test_models_retrain_only_when_enough_new_jobs_ended() -> None:
    from slurm_arnold.sim.predictors import RETRAIN_SHARE

    # 40 jobs a day: a retrain needs max(100, 5% of the window) new ones, so every 3rd day
    # once 200 have ended, never twice within one day's news.
    pred, counts = _fed_predictor("model_q", 1200, 40)
    assert pred.retrains >= 3  # type: ignore[attr-defined]
    steps = [b - a for a, b in itertools.pairwise(counts)]
    assert set(steps) <= {0, 1}
    first = counts.index(1)
    later = [i for i, s in enumerate(steps) if s == 1 and i >= first]
    assert all(b - a >= 3 for a, b in itertools.pairwise(later))
    assert 0 < RETRAIN_SHARE < 1


def test_before_its_first_fit_the_upper_model_predicts_the_limit_and_the_point_model_last2(
) -> None:
    from slurm_arnold.sim.predictors import OnlinePredictor

    records = _jobs(600, seed=11)
    for name in ("model_q", "model"):
        workload = build_workload(records, gpus_per_node=8, gpus_per_proc=8,
                                  cluster_gpus=10**6, lpj_gpus=10**6)
        pred = OnlinePredictor(name)
        before: list[tuple[float, float, float | None]] = []
        after: list[tuple[float, float]] = []
        for i, job in enumerate(workload.jobs):
            pred.observe_submit(job, user_active=0, active=0, running=0)
            last2 = (pred.histories[job.user].last2_seconds()
                     if job.user in pred.histories else None)
            guess = pred.predict(job)
            if pred.booster is None:
                before.append((guess, job.limit, last2))
            else:
                after.append((guess, job.limit))
            job.start, job.end = i * 600.0, i * 600.0 + job.runtime
            pred.observe_end(job)
            pred.maybe_retrain(i * 600.0)
        assert len(before) >= 200 and len(after) >= 200, name
        if name == "model_q":
            assert all(guess == limit for guess, limit, _ in before)
        else:
            known = [(g, lim, l2) for g, lim, l2 in before if l2 is not None]
            assert known and all(g == min(lim, max(1.0, l2)) for g, lim, l2 in known)
            assert any(g < lim for g, lim, _ in known)
        # Once fitted, both predict below the limit for some jobs (the model is in use).
        assert any(guess < limit for guess, limit in after), name


def test_model_q_calibrates_from_jobs_scored_out_of_sample() -> None:
    pred, counts = _fed_predictor("model_q", 1500, 50)
    calib = pred.calibrator  # type: ignore[attr-defined]
    # The first fit comes once 200 jobs (4 days) have ended; its window starts with a held-out
    # 15% of them (30); each job after it was predicted by a model that had not seen it, and
    # its score joined the window when it ended, its miss moving the level.
    assert counts.index(1) == 3
    assert len(calib._sorted) == 30 + 1500 - 200
    assert calib.alpha != pytest.approx(calib.target)  # moved from where it started
    assert pred.delta == calib.delta  # type: ignore[attr-defined]


def test_the_side_by_side_verdict_applies_each_rule() -> None:
    from benchmarks.sim import verdict

    base = {"policy": "slurm", "predictor": "requested", "mode": None, "lpj_mean_wait_h": 10.0,
            "lpj_mean_weighted_spread": 2.0, "mean_wait_h": 5.0, "utilization": 0.80}
    good = {"policy": "arnold", "predictor": "model_q", "mode": "share",
            "lpj_mean_wait_h": 10.0, "lpj_mean_weighted_spread": 1.5, "mean_wait_h": 5.25,
            "utilization": 0.79}
    assert verdict([base, good])["passed"]  # type: ignore[index]
    for key, value in (("lpj_mean_wait_h", 10.1), ("lpj_mean_weighted_spread", 2.0),
                       ("mean_wait_h", 5.3), ("utilization", 0.789)):
        bad = good | {key: value}
        result = verdict([base, bad])
        assert result is not None and not result["passed"], key
    assert verdict([base]) is None


def test_the_pay_for_itself_prefilter_is_exact_against_every_choice_of_nodes() -> None:
    import random
    from itertools import combinations

    import numpy as np

    from reservations.policy import _any_pays

    rng = random.Random(4)
    for _ in range(300):
        drains = sorted(rng.choice([0, 0, 600, 1800, 3600, 7200, 9000]) + rng.random()
                        for _ in range(rng.randint(2, 7)))
        n = rng.randint(1, len(drains))
        slurm_start = rng.uniform(0, 12000)
        share = rng.choice([0.5, 1.0])
        brute = any(n * (slurm_start - max(c)) >= share * sum(max(c) - d for d in c) - 1e-6
                    for c in combinations(drains, n))
        assert _any_pays(np.array(drains), n, slurm_start, share) == brute


def test_a_reservation_that_idles_more_than_it_saves_is_not_made() -> None:
    import numpy as np

    from reservations.policy import choose_reservation
    from slurm_arnold.placement import JobShape

    topo = parse_topology(_tree(2, 2, 4))
    names = sorted(topo.nodes)
    shape = JobShape(8, 2, 2, 8)  # 4 nodes
    # Three nodes idle now, the fourth drains in 2 h: reserving them idles 6 node-hours.
    drain = np.full(len(names), 10 * 3600.0)
    drain[:3] = 0.0
    drain[3] = 2 * 3600.0
    eligible = np.ones(len(names), dtype=bool)
    kwargs = {"algo": "best-fit", "horizon_s": math.inf}
    # Slurm would start it at 3 h: 4 nodes x 1 h saved < 6 idle node-hours.
    assert choose_reservation(topo, names, drain, eligible, 0.0, shape, slurm_start=3 * 3600.0,
                              **kwargs) is None  # type: ignore[arg-type]
    # At 4 h it saves 8 node-hours: it pays.
    choice = choose_reservation(topo, names, drain, eligible, 0.0, shape,
                                slurm_start=4 * 3600.0, **kwargs)  # type: ignore[arg-type]
    assert choice is not None and choice.idle_node_h == pytest.approx(6.0)
    assert choice.saved_node_h == pytest.approx(8.0)
    # Without a Slurm start to beat, the old rule reserves regardless.
    assert choose_reservation(topo, names, drain, eligible, 0.0, shape,
                              **kwargs) is not None  # type: ignore[arg-type]


def test_bench_sim_variants_quick() -> None:
    if not KTH.exists():
        pytest.skip(f"{KTH} is absent (the shared data is not beside this checkout)")
    from benchmarks.sim import VARIANTS

    result = CliRunner().invoke(main, ["bench", "sim", "--quick", "--variants", "--logs",
                                       "KTH", "--load", "0.9", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["variants"]["KTH"]
    assert [r["variant"] for r in rows] == ["slurm", "default", *VARIANTS]
    assert [r["policy"] for r in rows] == ["slurm"] + ["arnold"] * (len(VARIANTS) + 1)


def test_bench_sim_variant_picks_some_variants_and_refuses_unknown_ones() -> None:
    from benchmarks.sim import VARIANTS, variant_specs

    picked = ["plans past reservations", "LPJ keeps its place, plans past reservations"]
    assert set(picked) <= set(VARIANTS)
    # Usage errors come before any log is read: checked with or without the shared data.
    unknown = CliRunner().invoke(main, ["bench", "sim", "--variants", "--variant", "nope"])
    assert unknown.exit_code == 2 and "unknown variant 'nope'" in unknown.output
    alone = CliRunner().invoke(main, ["bench", "sim", "--variant", picked[0]])
    assert alone.exit_code == 2 and "add --variants" in alone.output
    specs = variant_specs(KTH.parent, ["KTH"], only=picked)
    if not specs:
        pytest.skip(f"{KTH} is absent (the shared data is not beside this checkout)")
    assert [s.tag for s in specs] == ["slurm", "default", *picked]
    assert [s.overrides for s in specs[2:]] == [VARIANTS[name] for name in picked]


def test_arrivals_scaled_squeezes_submits_and_keeps_run_times() -> None:
    from benchmarks.sim import arrivals_scaled

    records = [_record(i, 1000 + 100 * i, 1, 50, 60) for i in range(5)]
    squeezed = arrivals_scaled(records, 0.5)
    assert [r.submit for r in squeezed] == [1000, 1050, 1100, 1150, 1200]
    assert [(r.end or 0) - (r.start or 0) for r in squeezed] == [50] * 5
    assert arrivals_scaled(records, 1.0) == records


def test_bench_sim_rejects_an_unknown_log() -> None:
    result = CliRunner().invoke(main, ["bench", "sim", "--logs", "KTH,Mars"])
    assert result.exit_code == 2 and "Mars" in result.output


def _domain_cluster(keep: bool) -> SimCluster:
    """One leaf of 8 nodes cut into two NVLink domains of 4 (n0-n3, n4-n7)."""
    from benchmarks.sim import with_blocks

    cluster = SimCluster(with_blocks(parse_topology(_tree(1, 1, 8)), 4), 8)
    cluster.keep_domains_whole = keep
    return cluster


@pytest.mark.parametrize("keep", [True, False])
def test_keeping_domains_whole_packs_small_jobs_into_partly_used_domains(keep: bool) -> None:
    cluster = _domain_cluster(keep)
    assert cluster.n_domains == 2 and cluster.whole_domains() == 2
    cluster.take([5], 8)  # the second domain is now partly used
    nodes = cluster.tree_fit(cluster.whole_free(), 2)
    node = cluster.best_fit_node(cluster.whole_free(), 2)
    assert nodes is not None and node is not None
    cluster.take(nodes, 8)
    if keep:
        assert all(cluster.domain[i] == 1 for i in nodes) and cluster.domain[node] == 1
        assert cluster.whole_domains() == 1
    else:  # tree-fit's order: the first nodes of the leaf, breaking the whole domain
        assert nodes == [0, 1] and node == 0
        assert cluster.whole_domains() == 0


def test_sim_reports_whole_domains_and_the_preference_keeps_more() -> None:
    """Two domains of 4 nodes. Five one-node jobs fill the first domain and one node of the
    second; four end at once, the fifth runs on. One-node jobs then come one at a time: with
    the preference they go to the partly used second domain and the first stays whole; tree
    order puts them on the first domain's first node, breaking it for as long as they run."""
    from benchmarks.sim import with_blocks

    log = [_record(i, 0, 1, 10 if i < 4 else 1000, 1000) for i in range(5)]
    log += [_record(5 + k, 20 + 20 * k, 1, 15, 100) for k in range(40)]
    results = {}
    for keep in (True, False):
        cluster = SimCluster(with_blocks(parse_topology(_tree(1, 1, 8)), 4), 8)
        workload = build_workload(log, gpus_per_node=8, gpus_per_proc=8,
                                  cluster_gpus=cluster.total_gpus, lpj_gpus=10_000)
        sim = Simulation(cluster, workload, SimSettings(
            policy="arnold", predictor="oracle", placement="best-fit", keep_domains_whole=keep))
        results[keep] = sim.run()
        _check_conservation(sim, results[keep])
        assert results[keep]["domains"] == 2 and results[keep]["keep_domains_whole"] is keep
    # From t = 10 to 1000 the first domain is whole with the preference; without it, broken
    # 15 s in every 20 s while the one-node jobs run (t = 20 .. 815).
    assert results[True]["whole_domains_free_mean"] == pytest.approx(990 / 1000, abs=1e-3)
    assert results[False]["whole_domains_free_mean"] == pytest.approx(
        (990 - 40 * 15) / 1000, abs=1e-3)


def test_bench_sim_domains_quick() -> None:
    if not KTH.exists():
        pytest.skip(f"{KTH} is absent (the shared data is not beside this checkout)")
    result = CliRunner().invoke(main, ["bench", "sim", "--quick", "--logs", "KTH", "--domains",
                                       "4", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["KTH"]
    assert [(r["policy"], r["keep_domains_whole"]) for r in rows] == [
        ("slurm", False), ("arnold", True), ("arnold", False)]
    # 4 minipods x 4 leaves of 7 nodes, each leaf cut into domains of 4 and 3 nodes.
    assert all(r["domains"] == 32 and 0 < r["whole_domains_free_mean"] <= 32 for r in rows)
    bad = CliRunner().invoke(main, ["bench", "sim", "--domains", "4", "--variants"])
    assert bad.exit_code == 2


def test_the_bench_section_says_whether_the_safety_net_stopped_a_placement() -> None:
    from benchmarks.sim import KEYS as COLUMNS
    from benchmarks.sim import markdown

    row = {k: 0.0 for k in COLUMNS} | {"jobs": 10, "lpjs": 1, "policy": "slurm",
                                    "predictor": "requested", "mode": None, "seconds": 1.0,
                                    "placements_time_limited": 0, "placement_slowest_s": 0.25}
    ours = row | {"policy": "arnold", "placements_time_limited": 0, "placement_slowest_s": 1.5}
    text = markdown({"X": [row, ours]}, "cmd", None)
    assert "X: 0 placements stopped" in text and "do not depend" in text and "1.50 s" in text
    stopped = markdown({"X": [row, ours | {"placements_time_limited": 3}]}, "cmd", None)
    assert "X: 3 placements stopped" in stopped and "rows depend on the machine's load" in stopped


def test_bench_sim_held_out_replays_the_jobs_after_the_tables_ones() -> None:
    from benchmarks.logs import LOGS
    from benchmarks.sim import read_log

    curie = next(s for s in LOGS if s.name == "Curie")
    data = KTH.parent
    if not (data / curie.file).exists():
        pytest.skip(f"{data / curie.file} is absent (the shared data is not beside this "
                    "checkout)")
    assert curie.jobs is not None
    slice_ = read_log(data, curie, 5, skip=curie.jobs)
    whole = read_log(data, curie, curie.jobs + 5)
    assert slice_ == whole[curie.jobs:]
    result = CliRunner().invoke(main, ["bench", "sim", "--quick", "--held-out", "--logs",
                                       "KTH,Curie", "--json"])
    assert result.exit_code == 0, result.output
    held = json.loads(result.stdout)["held_out"]
    assert list(held) == [f"Curie (jobs {curie.jobs:,} to {curie.jobs + 1000:,})"]
    rows = held[next(iter(held))]
    assert [r["policy"] for r in rows] == ["slurm", "arnold"] and rows[0]["jobs"] == 1000
    only_kth = CliRunner().invoke(main, ["bench", "sim", "--quick", "--held-out", "--logs",
                                         "KTH"])
    assert only_kth.exit_code == 1 and "only Curie and HPC2N" in only_kth.output
    # The variants on the same slice (a repo command for what docs/sim.md measured there).
    from benchmarks.sim import VARIANTS, variant_specs

    specs = variant_specs(data, ["KTH", "Curie"], held_out=True)
    assert {s.log for s in specs} == {"Curie"}
    assert [s.tag for s in specs] == ["slurm", "default", *VARIANTS]
    assert all(s.skip == curie.jobs and s.limit == curie.jobs for s in specs)
    none = CliRunner().invoke(main, ["bench", "sim", "--quick", "--held-out", "--variants",
                                     "--logs", "KTH"])
    assert none.exit_code == 1 and "no held-out jobs" in none.output
    sweep = CliRunner().invoke(main, ["bench", "sim", "--held-out", "--horizons", "1"])
    assert sweep.exit_code == 2 and "--horizons" in sweep.output


def test_variants_sections_are_named_by_load_held_out_and_the_picked_variants() -> None:
    from benchmarks.sim import variants_markdown, variants_section

    assert variants_section(1.0) == "sim-variants"
    assert variants_section(0.93, held_out=True) == "sim-variants-x0.93-held-out"
    one = variants_section(1.0, True, ["plans past reservations"])
    two = variants_section(1.0, True, ["LPJ keeps its place, plans past reservations",
                                       "plans past reservations"])
    # Different picks land in different sections; the same picks in any order in one.
    assert one == "sim-variants-held-out-selected-plans-past-reservations"
    assert two != one and two == variants_section(
        1.0, True, ["plans past reservations", "LPJ keeps its place, plans past reservations"])
    row = {"variant": "default", "policy": "arnold", "predictor": "model_q", "mode": "share",
           "lpj_mean_wait_h": 1.0, "lpj_mean_weighted_spread": 1.0,
           "mean_wait_h": 1.0, "utilization": 0.5, "reserved_idle_node_h": 0.0,
           "reservations": 0}
    rows = {"KTH": [row | {"variant": "slurm", "policy": "slurm", "predictor": "requested"},
                    row]}
    picked = variants_markdown(rows, "cmd", 1.0, only=["plans past reservations"])
    every = variants_markdown(rows, "cmd", 1.0)
    assert "the variants the command names" in picked and "each variant" not in picked
    assert "each variant of `benchmarks.sim.VARIANTS`" in every


def test_bench_sim_site_scale_quick_replays_both_cases_on_their_trees() -> None:
    hpc2n = KTH.parent / "HPC2N-2002-2.2-cln.swf.gz"
    if not hpc2n.exists():
        pytest.skip(f"{hpc2n} is absent (the shared data is not beside this checkout)")
    result = CliRunner().invoke(main, ["bench", "sim", "--quick", "--site-scale", "--json",
                                       "--data", str(KTH.parent)])
    assert result.exit_code == 0, result.output
    runs = {r["log"]: r for r in json.loads(result.stdout)}
    assert {name: (r["nodes"], r["jobs"]) for name, r in runs.items()} == {
        "HPC2N-1024": (1024, 1000), "Curie": (5120, 1000)}
    assert all(r["policy"] == "arnold" and r["predictor"] == "model_q" for r in runs.values())
    bad = CliRunner().invoke(main, ["bench", "sim", "--site-scale", "--variants"])
    assert bad.exit_code == 2
