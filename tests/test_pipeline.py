"""CrossPipe schedules (slurm_arnold/pipeline): closed forms, invariants, the solver's optimum."""

from __future__ import annotations

import itertools
import json
import logging
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from site_config import load_config
from slurm_arnold.cli.main import main
from slurm_arnold.errors import ArnoldError
from slurm_arnold.pipeline.greedy import greedy
from slurm_arnold.pipeline.model import Block, PipelineModel, dependency
from slurm_arnold.pipeline.run import run
from slurm_arnold.pipeline.schedules import FUSED, STATIC
from slurm_arnold.pipeline.simulate import Result, Schedule, simulate
from slurm_arnold.pipeline.solver import solve
from slurm_arnold.site_state import open_user_db

TIMES = [(1.0, 1.0, 1.0), (1.0, 2.0, 1.0), (1.0, 3.0, 1.0), (1.0, 1.0, 0.5),
         (1.5, 2.0, 0.7), (2.0, 3.0, 1.0), (1.0, 1.0, 0.25)]
SIZES = [(2, 4), (3, 9), (4, 8), (4, 12), (8, 32)]


def _bubble(model: PipelineModel, name: str) -> float:
    return run(model, name)[1].makespan - model.work()  # i1f1b: 2 chunks


@pytest.mark.parametrize("tf,tb,tw", TIMES)
@pytest.mark.parametrize("p,m", SIZES)
def test_closed_forms_without_communication(tf: float, tb: float, tw: float, p: int,
                                            m: int) -> None:
    model = PipelineModel(p, m, tf, tb, tw)
    assert _bubble(model, "1f1b") == pytest.approx((p - 1) * (tf + tb + tw))
    assert _bubble(model, "i1f1b") == pytest.approx((p - 1) / 2 * (tf + tb + tw))
    if tb >= tw:  # ZB-H1 cannot hide more than the last stage's wait for its first F
        assert _bubble(model, "zbh1") == pytest.approx((p - 1) * (tf + tb - tw))
    if m >= 2 * p - 1:
        # ZB-H2's (p - 1)(T_F + T_B - 2 T_W), but never less than the (p - 1) T_F the last
        # stage waits for its first input in one iteration (docs/pipeline.md).
        assert _bubble(model, "zbh2") == pytest.approx(
            max((p - 1) * (tf + tb - 2 * tw), (p - 1) * tf))


def test_per_stage_times() -> None:
    model = PipelineModel(4, 8, (1.0, 1.0, 1.0, 1.5), 1.0, 0.5)
    assert model.times("F") == (1.0, 1.0, 1.0, 1.5) and model.times("W") == (0.5,) * 4
    result = simulate(model, STATIC["1f1b"](model), fused_backward=True)
    # The slow last stage is busier: the least bubble; the mean is what bubble_rate says.
    assert result.bubble_per_stage[3] < result.bubble_per_stage[0]
    assert result.bubble_rate == pytest.approx(sum(result.bubble_per_stage) / 4)
    _independent_check(model, STATIC["1f1b"](model), result, True)
    with pytest.raises(ArnoldError, match="one per stage"):
        PipelineModel(4, 8, (1.0, 2.0))


def test_v_shaped_chunks_come_back_without_a_wrap_around() -> None:
    model = PipelineModel(4, 4, chunks=2, chunk_shape="v")
    assert [model.place(v) for v in range(8)] == [(0, 0), (1, 0), (2, 0), (3, 0),
                                                  (3, 1), (2, 1), (1, 1), (0, 1)]
    assert all(model.virtual(*model.place(v)) == v for v in range(8))
    assert model.boundary(3, 3) == -1  # the turn at the last stage is local
    with pytest.raises(ArnoldError, match=r"boundaries are 0\.\.2"):
        PipelineModel(4, 4, chunks=2, chunk_shape="v", cross_links=frozenset({3}))
    loop = PipelineModel(4, 4, chunks=2, cross_links=frozenset({3}))  # the loop's wrap-around
    assert loop.boundary(3, 0) == 3


def test_natural_peaks() -> None:
    model = PipelineModel(4, 8)
    peaks = {n: simulate(model, STATIC[n](model)).peak_memory for n in ("1f1b", "zbh1", "zbh2")}
    assert peaks["1f1b"] == [4, 3, 2, 1]
    assert max(peaks["zbh1"]) == 4
    assert peaks["zbh2"][0] == 7  # 2p - 1


def _independent_check(model: PipelineModel, schedule: Schedule, result: Result,
                       fused: bool) -> None:
    """Dependencies, links and stage exclusivity checked from the times alone."""
    for s, order in enumerate(schedule):
        spans = sorted(result.times[(s, b)] for b in order)
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end - 1e-9, f"stage {s} runs two blocks at once"
        last = model.sub_blocks - 1
        for b in order:
            start = result.times[(s, b)][0]
            if b.part:
                assert start >= result.times[(s, b._replace(part=b.part - 1))][1] - 1e-9
            elif b.kind != "F":
                need = Block("F" if b.kind == "B" else "B", b.mb, b.chunk, last)
                assert start >= result.times[(s, need)][1] - 1e-9
            dep = dependency(model, s, b)
            if dep is None:
                continue
            src, blk, boundary = dep
            sent = result.times[(src, blk)][1]
            if fused and blk.kind == "B":
                sent = max(sent, result.times[(src, Block("W", blk.mb, blk.chunk))][1])
            occupancy, latency = model.link_cost(boundary) if boundary >= 0 else (0.0, 0.0)
            assert start >= sent + occupancy + latency - 1e-9, (s, b.label())


@pytest.mark.parametrize("name", ["1f1b", "i1f1b", "zbh1", "zbh2", "greedy", "greedy/3",
                                  "greedy-loop", "greedy-v"])
@pytest.mark.parametrize("delays", [(0.0, 0.0), (2.0, 0.25), (2.0, 2.0)])
def test_every_schedule_respects_inputs_links_and_memory(name: str,
                                                         delays: tuple[float, float]) -> None:
    name, _, parts = name.partition("/")
    name, _, shape = name.partition("-")
    model = PipelineModel(4, 8, 1.0, 1.5, 0.5, latency=delays[0], bandwidth_time=delays[1],
                          cross_links=frozenset({1}), sub_blocks=int(parts or 1),
                          chunks=2 if shape else 1, chunk_shape=shape or "loop")
    used = replace(model, chunks=2) if name == "i1f1b" else model
    schedule = greedy(used, 5.0) if name == "greedy" else STATIC[name](used)
    result = simulate(used, schedule, fused_backward=name in FUSED)
    _independent_check(used, schedule, result, name in FUSED)
    if name == "greedy":
        assert max(result.peak_memory) <= 5.0 + 1e-9
    # No stage starts before the first chunk-forwards of the stages before it have run.
    assert result.makespan >= model.work() + 3 * 1.0 / used.chunks - 1e-9


def test_bad_schedules_are_refused() -> None:
    model = PipelineModel(2, 2)
    good = STATIC["1f1b"](model)
    with pytest.raises(ArnoldError, match="runs B0 before F0"):
        simulate(model, [[Block("B", 0), *[b for b in good[0] if b != Block("B", 0)]],
                         good[1]])
    with pytest.raises(ArnoldError, match="exactly once"):
        simulate(model, [good[0][:-1], good[1]])
    overtaking = [good[0], [Block("F", 1), Block("F", 0), Block("B", 0), Block("W", 0),
                            Block("B", 1), Block("W", 1)]]
    simulate(model, overtaking)  # F1 before F0 on stage 1 is a legal (if odd) order
    # Stage 0 wants B0 before sending F1; stage 1 wants F1 before running B0.
    stuck = [[Block("F", 0), Block("B", 0), Block("F", 1), Block("W", 0), Block("B", 1),
              Block("W", 1)],
             [Block("F", 0), Block("F", 1), Block("B", 0), Block("W", 0), Block("B", 1),
              Block("W", 1)]]
    with pytest.raises(ArnoldError, match="deadlocks"):
        simulate(model, stuck)
    with pytest.raises(ArnoldError, match="sub-blocks are for the greedy"):
        STATIC["zbh1"](replace(model, sub_blocks=2))
    swapped = [[Block("F", 0), Block("F", 1), Block("B", 1), Block("B", 0), Block("W", 0),
                Block("W", 1)], overtaking[1]]
    with pytest.raises(ArnoldError, match="over --mem-limit"):
        simulate(replace(model, mem_limit=1.0), swapped)


def _orders(m: int) -> list[list[Block]]:
    """Every order of one stage's blocks with micro-batches in order and B after F, W after B."""
    out = []

    def walk(acc: list[Block], nf: int, nb: int, nw: int) -> None:
        if len(acc) == 3 * m:
            out.append(list(acc))
            return
        for kind, n, ok in (("F", nf, nf < m), ("B", nb, nb < nf), ("W", nw, nw < nb)):
            if ok:
                acc.append(Block(kind, n))
                walk(acc, nf + (kind == "F"), nb + (kind == "B"), nw + (kind == "W"))
                acc.pop()

    walk([], 0, 0, 0)
    return out


@pytest.mark.parametrize("m,limit,delays,slow", [(2, 2.0, (2.0, 0.25), 1.0),
                                                 (2, 1.5, (1.0, 1.0), 1.0),
                                                 (3, 2.0, (2.0, 2.0), 1.0),
                                                 (3, 3.0, (0.5, 0.0), 1.0),
                                                 (3, 2.0, (1.0, 0.5), 1.7)])
def test_the_solver_finds_the_brute_force_optimum(m: int, limit: float,
                                                  delays: tuple[float, float],
                                                  slow: float) -> None:
    # ``slow``: the second stage's forward and backward take that much longer (per-stage times).
    model = PipelineModel(2, m, (1.0, slow), (2.0, 2.0 * slow), 1.0, mem_limit=limit,
                          latency=delays[0], bandwidth_time=delays[1],
                          cross_links=frozenset({0}))
    best = float("inf")
    for a in _orders(m):
        for b in _orders(m):
            try:
                best = min(best, simulate(model, [a, b]).makespan)
            except ArnoldError:  # over the memory limit
                continue
    solved = solve(model, greedy(model, limit), limit=limit, time_limit=30)
    assert solved.status == "optimal"
    assert solved.makespan == pytest.approx(best)
    assert simulate(model, solved.schedule).makespan == pytest.approx(best)


def test_cli_json_keys_and_errors(tmp_path: Path, isolated_config: Path) -> None:
    runner = CliRunner()
    base = ["pipeline", "--stages", "4", "--microbatches", "8", "--latency", "2",
            "--bandwidth-time", "0.25", "--cross-links", "1"]
    one = runner.invoke(main, [*base, "--schedule", "greedy", "--json"])
    assert one.exit_code == 0, one.output
    doc = json.loads(one.output)
    assert {"schedule", "makespan", "bubble_rate", "peak_memory", "order"} <= set(doc)
    assert len(doc["order"]) == 4 and len(doc["order"][0]) == 24
    assert doc["bubble_rate"] == pytest.approx((doc["makespan"] - 24) / doc["makespan"],
                                               abs=1e-6)
    gantt = tmp_path / "g.png"
    every = runner.invoke(main, [*base, "--schedule", "all", "--json", "--gantt", str(gantt)])
    assert every.exit_code == 0, every.output
    docs = json.loads(every.stdout)
    assert [d["schedule"] for d in docs] == ["1f1b", "i1f1b", "zbh1", "zbh2", "greedy",
                                             "optimal"]
    by = {d["schedule"]: d for d in docs}
    assert by["optimal"]["makespan"] <= by["greedy"]["makespan"] < by["1f1b"]["makespan"]
    assert (tmp_path / "g-greedy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = runner.invoke(main, [*base, "--schedule", "zbh1", "--timeline"])
    assert text.exit_code == 0 and "stage  3 |" in text.output
    why = runner.invoke(main, [*base, "--explain"])
    assert why.exit_code == 0 and "critical path" in why.output
    assert "after message over slow link 1 up" in why.output  # the slow link is on it
    bad = runner.invoke(main, [*base, "--cross-links", "3"])
    assert bad.exit_code == 1 and "boundaries are 0..2" in bad.output
    low = runner.invoke(main, [*base, "--schedule", "1f1b", "--mem-limit", "3"])
    assert low.exit_code == 1 and "over --mem-limit 3" in low.output
    unwritable = runner.invoke(main, [*base, "--schedule", "1f1b", "--gantt",
                                      "/proc/no-such-dir/g.png"])
    assert unwritable.exit_code == 1 and "cannot write /proc/no-such-dir/g.png" in \
        unwritable.output and "give --gantt a path" in unwritable.output
    usage = runner.invoke(main, ["pipeline", "--microbatches", "8"])
    assert usage.exit_code == 2 and "--stages" in usage.output


def test_from_job_finds_the_cross_minipod_boundaries(tmp_path: Path, isolated_config: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)  # the news is at info

    monkeypatch.setenv("ARNOLD_STATE_DIR", str(tmp_path / "state"))
    topo = tmp_path / "topology.conf"
    topo.write_text("SwitchName=l0 Nodes=n[1-2]\nSwitchName=l1 Nodes=n[3-4]\n"
                    "SwitchName=p0 Switches=l0\nSwitchName=p1 Switches=l1\n"
                    "SwitchName=core Switches=p[0-1]\n")
    db = open_user_db(load_config())  # arnold-sbatch records jobs in the user's own database
    assignment = [{"node": f"n{k + 1}", "pp": k, "dp": 0, "tp": [0, 8]} for k in range(4)]
    db.record_job({"user": "u", "slurm_job_id": 4242, "status": "submitted",
                   "spec": json.dumps({"tp": 8, "pp": 4, "dp": 1}),
                   "placement": json.dumps({"assignment": assignment}), "rankfile": ""})
    db.close()
    out = CliRunner().invoke(main, ["pipeline", "--from-job", "4242", "--microbatches", "8",
                                    "--tf", "0.01", "--tb", "0.01", "--tw", "0.01",
                                    "--message-bytes", "64M", "--topology", str(topo),
                                    "--schedule", "1f1b", "--json"])
    assert out.exit_code == 0, out.output
    assert "cross-minipod boundaries [1]" in caplog.text
    doc = json.loads(out.stdout)
    free = CliRunner().invoke(main, ["pipeline", "--stages", "4", "--microbatches", "8",
                                     "--tf", "0.01", "--tb", "0.01", "--tw", "0.01",
                                     "--schedule", "1f1b", "--json"])
    assert doc["makespan"] > json.loads(free.stdout)["makespan"]
    # The planner's cost model prices the job's stages (seconds) and its messages.
    priced = CliRunner().invoke(main, ["pipeline", "--from-job", "4242", "--model", "gpt-7.5b",
                                       "--global-batch", "8", "--gpu", "a100-80g", "--topology",
                                       str(topo), "--schedule", "1f1b", "--json"])
    assert priced.exit_code == 0, priced.output
    got = json.loads(priced.stdout)
    assert len(got["order"][0]) == 3 * 8  # 8 micro-batches: the global batch over DP 1
    assert got["t_f"][3] > got["t_f"][0] > 0  # the output layer on the last stage
    assert "message of 2.1e+06 bytes" in caplog.text  # 2 x 2048 x 4096 / TP 8
    both = CliRunner().invoke(main, ["pipeline", "--from-job", "4242", "--model", "gpt-7.5b",
                                     "--global-batch", "8", "--tf", "2", "--topology",
                                     str(topo)])
    assert both.exit_code == 2 and "drop --tf" in both.output
    missing = CliRunner().invoke(main, ["pipeline", "--from-job", "7", "--microbatches", "8",
                                        "--message-bytes", "1M", "--topology", str(topo)])
    assert missing.exit_code == 1 and "not submitted through arnold-sbatch" in missing.output


def test_bench_pipeline_quick(isolated_config: Path) -> None:
    out = CliRunner().invoke(main, ["bench", "pipeline", "--quick", "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["targets"][0]["optimal"] <= doc["targets"][0]["greedy"]
    assert all(r["status"] == "optimal" and r["ratio"] >= 1 - 1e-9
               for r in doc["greedy_vs_exact"])
    assert {r["schedule"] for r in doc["speed"]} == {"1f1b", "i1f1b", "zbh1", "zbh2", "greedy"}


@pytest.mark.parametrize("extra", [[], ["--json"], ["--schedule", "1f1b", "--json"]])
def test_no_schedule_fitting_the_memory_limit_is_an_error_not_an_empty_result(
        extra: list[str]) -> None:
    out = CliRunner().invoke(main, ["pipeline", "--stages", "4", "--microbatches", "8",
                                    "--mem-limit", "0.5", *extra])
    assert out.exit_code == 1 and out.stdout == ""
    assert out.stderr.splitlines()[-1].startswith("arnold: error: ")
