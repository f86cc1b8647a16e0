"""``arnold plan --nest-input``: NEST's own solver input, priced and searched on NEST's costs
(issue 25)."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from slurm_arnold.cli.main import main
from slurm_arnold.errors import ArnoldError
from slurm_arnold.plan.nest_costs import price, search_nest
from slurm_arnold.plan.nest_input import (
    NestInputError,
    NestLayout,
    parse_nest_input,
    read_nest_input,
)
from tests.conftest import SHARED

NEST_DIR = SHARED / "data" / "reference" / "nest"
INSTANCE = NEST_DIR / "llama2_64dev.json"
RESULT = NEST_DIR / "llama2_64dev.nest-result.json"


def _shared() -> tuple[dict[str, Any], dict[str, Any]]:
    if not INSTANCE.exists() or not RESULT.exists():
        pytest.skip(f"no NEST instance at {NEST_DIR}")
    return json.loads(INSTANCE.read_text()), json.loads(RESULT.read_text())


def _nest_layout(doc: dict[str, Any], result: dict[str, Any]) -> NestLayout:
    inst = parse_nest_input(doc)
    g = inst.graphs[result["tensorParallelDegree"]]
    position = {node: k for k, node in enumerate(g.ids)}
    cuts = [0] + [position[stage["nodes"][-1]] + 1 for stage in result["stages"]]
    return NestLayout(result["tensorParallelDegree"], result["dataParallelDegree"], tuple(cuts),
                      result["stages"][0]["devicesForStage"])


def test_prices_nests_own_layout_as_nest_does() -> None:
    """Our price of the layout NEST chose is NEST's own number: same costs, same order of
    floating-point operations (so equal, not close)."""
    doc, result = _shared()
    inst = parse_nest_input(doc)
    time_per_batch, _ = price(inst, _nest_layout(doc, result))
    assert time_per_batch == result["finalTimePerBatch"]


def test_search_matches_or_beats_nest_on_the_shared_instance() -> None:
    doc, result = _shared()
    plan = search_nest(parse_nest_input(doc))
    assert plan.time_per_batch <= result["finalTimePerBatch"]
    # A layout that costs the same is NEST's layout or one as good; it uses the devices given.
    lay = plan.layout
    assert lay.pp * lay.devices_per_stage * lay.dp <= doc["maxDevices"]


def _random_instance(rng: random.Random, *, skip_edge: bool) -> dict[str, Any]:
    """A small chain (6-8 nodes, TP widths 1 and 2) whose memory limit leaves some cuts
    infeasible, on a two- or three-level network."""
    n = rng.randint(6, 8)
    levels = rng.choice([[4, 3], [2, 2, 3]])
    devices = 1
    for fan in levels:
        devices *= fan
    nodes: dict[str, list[dict[str, Any]]] = {}
    edges: dict[str, list[dict[str, Any]]] = {}
    base = [(rng.uniform(50, 200), rng.uniform(50, 200), rng.uniform(1, 3) * 1e9,
             rng.uniform(0.2, 1) * 1e9) for _ in range(n)]
    links = [(k - 1, k) for k in range(1, n)] + ([(0, 2)] if skip_edge else [])
    message = [rng.uniform(1, 9) * 1e7 for _ in links]
    # TP 2's latency relative to TP 1's: sometimes faster per device-pair, sometimes not.
    slowdown = {1: 1.0, 2: rng.uniform(0.85, 1.15)}
    for width in (1, 2):
        nodes[str(width)] = [
            {"id": k - 1, "optimalLatencyFw": fw * slowdown[width],
             "optimalLatencyBw": bw * slowdown[width], "activationSize": act / width,
             "parameterSize": par / width, "isTensorParallelized": width > 1, "energy": 0}
            for k, (fw, bw, act, par) in enumerate(base)]
        edges[str(width)] = [{"sourceId": u - 1, "destId": v - 1, "communicationCost": c}
                             for (u, v), c in zip(links, message, strict=True)]
    return {
        "ep_degree": 1, "cp_degree": 1, "sp_enabled": False,
        "maxMemoryPerDevice": rng.uniform(8, 14) * 1e9, "maxDevices": devices,
        "bandwidth": 1e9, "bws": [rng.uniform(50, 900) * 1e9 for _ in levels],
        "latency_per_level": [rng.uniform(1, 5) * 1e-4 for _ in levels],
        "devices_per_level": levels, "frequency": 1e6,
        "mbsInBatch": float(rng.choice([16, 33, 64])), "nodes": nodes, "edges": edges,
        "activationRecomputation": rng.random() < 0.6,
        "optimizerAlgorithm": rng.choice(["SGD", "Adam"]),
    }


def _brute_force(doc: dict[str, Any]) -> float:
    """Every TP width, degree, stage count and contiguous cut, each priced."""
    inst = parse_nest_input(doc)
    best = float("inf")
    for width, g in inst.graphs.items():
        for stages in range(1, g.size + 1):
            for inner in itertools.combinations(range(1, g.size), stages - 1):
                cuts = (0, *inner, g.size)
                for dp in range(1, min(inst.max_devices, inst.mbs_in_batch) + 1):
                    if stages * width * dp > inst.max_devices:
                        break
                    best = min(best, price(inst, NestLayout(width, dp, cuts, width))[0])
    return best


@pytest.mark.parametrize("seed", range(12))
def test_search_is_exact_against_brute_force(seed: int) -> None:
    doc = _random_instance(random.Random(seed), skip_edge=seed % 3 == 0)
    expected = _brute_force(doc)
    assert expected < float("inf")
    assert search_nest(parse_nest_input(doc)).time_per_batch == expected


def test_nothing_fits_is_one_line() -> None:
    doc = _random_instance(random.Random(2), skip_edge=False)
    doc["maxMemoryPerDevice"] = 1e6
    with pytest.raises(ArnoldError, match="no layout fits in memory"):
        search_nest(parse_nest_input(doc))


def test_memory_decides_what_fits() -> None:
    """With room for every layer on one device the plan may skip the pipeline; with memory for
    60% of the model on a device, no stage holds everything and the time can only grow."""
    doc = _random_instance(random.Random(3), skip_edge=False)
    doc["maxMemoryPerDevice"] = 1e15
    roomy = search_nest(parse_nest_input(doc))
    whole = sum(n["activationSize"] + 8 * n["parameterSize"] for n in doc["nodes"]["1"])
    doc["maxMemoryPerDevice"] = 0.6 * whole
    tight = search_nest(parse_nest_input(doc))
    assert tight.layout.pp >= 2
    assert tight.time_per_batch >= roomy.time_per_batch


def test_cli_json_keys(tmp_path: Path) -> None:
    doc = _random_instance(random.Random(5), skip_edge=False)
    path = tmp_path / "instance.json"
    path.write_text(json.dumps(doc))
    out = CliRunner().invoke(main, ["plan", "--nest-input", str(path), "--json"])
    assert out.exit_code == 0, out.output
    got = json.loads(out.output)
    assert {"tp", "pp", "dp", "stages", "finalTimePerBatch", "search_seconds"} <= set(got)
    assert got["pp"] == len(got["stages"])
    placed = sorted(n for stage in got["stages"] for n in stage["nodes"])
    assert placed == list(range(-1, len(doc["nodes"]["1"]) - 1))
    text = CliRunner().invoke(main, ["plan", "--nest-input", str(path)])
    assert text.exit_code == 0 and "time per batch" in text.output


def _break(doc: dict[str, Any], how: str) -> Any:
    if how == "array":
        return [doc]
    if how == "missing":
        del doc["nodes"]
    elif how == "negative-latency":
        doc["nodes"]["1"][2]["optimalLatencyFw"] = -1
    elif how == "string-devices":
        doc["maxDevices"] = "64"
    elif how == "branching":
        doc["edges"]["1"].append({"sourceId": -1, "destId": 5, "communicationCost": 1})
        doc["edges"]["2"].append({"sourceId": -1, "destId": 5, "communicationCost": 1})
        doc["edges"]["1"] = [e for e in doc["edges"]["1"] if e["destId"] != 1]
        doc["edges"]["2"] = [e for e in doc["edges"]["2"] if e["destId"] != 1]
    elif how == "cycle":
        for width in ("1", "2"):
            doc["edges"][width].append({"sourceId": 3, "destId": 0, "communicationCost": 1})
    elif how == "widths-differ":
        doc["edges"]["2"].pop()
    elif how == "unknown-node":
        doc["edges"]["1"][0]["destId"] = 99
    elif how == "list-id":
        doc["edges"]["1"][0]["sourceId"] = [0]
    elif how == "levels-mismatch":
        doc["latency_per_level"].append(1e-4)
    elif how == "optimizer":
        doc["optimizerAlgorithm"] = "LAMB"
    return doc


@pytest.mark.parametrize("how", ["array", "missing", "negative-latency", "string-devices",
                                 "branching", "cycle", "widths-differ", "unknown-node", "list-id",
                                 "levels-mismatch", "optimizer", "not-json"])
def test_bad_input_is_one_line_exit_1(tmp_path: Path, how: str) -> None:
    path = tmp_path / "instance.json"
    if how == "not-json":
        path.write_text("{\"maxDevices\": 64,")
    else:
        path.write_text(json.dumps(_break(_random_instance(random.Random(1), skip_edge=False),
                                          how)))
    out = CliRunner().invoke(main, ["plan", "--nest-input", str(path)])
    assert out.exit_code == 1, out.output
    assert "Traceback" not in out.output
    lines = out.output.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0], out.output
    with pytest.raises(NestInputError):
        read_nest_input(path)


def test_nest_input_takes_no_model_options(tmp_path: Path) -> None:
    out = CliRunner().invoke(main, ["plan", "--nest-input", str(tmp_path / "x.json"),
                                    "--gpus", "8"])
    assert out.exit_code == 2 and "--gpus" in out.output
    # An on/off flag is named as it was typed.
    out = CliRunner().invoke(main, ["plan", "--nest-input", str(tmp_path / "x.json"),
                                    "--no-sequence-parallel"])
    assert out.exit_code == 2 and "drop --no-sequence-parallel" in out.output
    out = CliRunner().invoke(main, ["plan", "--gpus", "8", "--global-batch", "8"])
    assert out.exit_code == 2 and "--model" in out.output
