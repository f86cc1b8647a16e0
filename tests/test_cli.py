"""The ``arnold`` CLI: exit codes, one-line errors, ``topology show`` offline and live."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from slurm_arnold.cli.main import main
from slurm_arnold.slurm import Slurm
from tests.conftest import tree_nodes

REPO = Path(__file__).resolve().parents[1]
TOPO = "SwitchName=l0 Nodes=x[1-2]\nSwitchName=l1 Nodes=x[3-4]\nSwitchName=c Switches=l[0-1]\n"


def test_every_command_has_help_text() -> None:
    def walk(cmd: click.Command, path: str) -> None:
        assert cmd.help, f"`{path}` has no help text"
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(click.Context(cmd)):
                sub = cmd.get_command(click.Context(cmd), name)
                assert sub is not None, f"`{path} {name}` is listed but does not load"
                walk(sub, f"{path} {name}")

    walk(main, "arnold")


def test_every_option_has_help_text() -> None:
    missing = []

    def walk(cmd: click.Command, path: str) -> None:
        for param in cmd.params:
            if isinstance(param, click.Option) and not param.help and not param.hidden:
                missing.append(f"`{path}` {param.opts[0]}")
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(click.Context(cmd)):
                sub = cmd.get_command(click.Context(cmd), name)
                assert sub is not None, f"`{path} {name}` is listed but does not load"
                walk(sub, f"{path} {name}")

    walk(main, "arnold")
    assert not missing, missing


TOPOLOGY_USERS = [
    ["topology", "show"],
    ["place", "--tp", "8", "--pp", "2", "--nodes", "2"],
    ["sim", "--policy", "slurm", "--swf", "{swf}"],
    ["plan", "--model", "gpt-1.7b", "--gpus", "8", "--global-batch", "8"],
    ["pipeline", "--from-job", "1", "--microbatches", "4", "--tf", "1", "--tb", "1", "--tw",
     "1", "--message-bytes", "1M"],
]


def _with_swf(argv: list[str], tmp_path: Path) -> list[str]:
    """``argv`` with "{swf}" replaced by a one-job SWF log."""
    swf = tmp_path / "one.swf"
    swf.write_text("1 0 0 100 8 -1 -1 8 200 -1 1 1 1 -1 1 -1 -1 -1\n")
    return [str(swf) if a == "{swf}" else a for a in argv]


@pytest.mark.parametrize("argv", TOPOLOGY_USERS, ids=lambda a: a[0])
def test_a_missing_topology_file_is_the_same_usage_error_everywhere(
        argv: list[str], tmp_path: Path, isolated_config: Path) -> None:
    result = CliRunner().invoke(main, [*_with_swf(argv, tmp_path), "--topology",
                                       str(tmp_path / "none.conf")])
    assert result.exit_code == 2, result.output
    assert "'--topology': File" in result.output and "does not exist" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("argv", TOPOLOGY_USERS[:3], ids=lambda a: a[0])
def test_a_garbage_topology_file_is_one_line_and_exit_1(
        argv: list[str], tmp_path: Path, isolated_config: Path) -> None:
    garbage = tmp_path / "garbage.conf"
    garbage.write_bytes(b"\x00\xffnot a topology\n")
    result = CliRunner().invoke(main, [*_with_swf(argv, tmp_path), "--topology", str(garbage)])
    assert result.exit_code == 1, result.output
    assert result.output.count("\n") == 1 and str(garbage) in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(("argv", "code", "message"), [
    (["arnold", "place", "--tp", "8", "--pp", "2"], 2, "give --dp or --nodes"),
    (["arnold", "place", "--tp", "8", "--pp", "2", "--nodes", "2", "--alpha", "3"], 1,
     "outside [0, 1]"),
    (["arnold", "place", "--tp", "8", "--pp", "2", "--nodes", "2", "--alpha", "0.3", "--align",
      "auto"], 2, "not both"),
    (["arnold-sbatch", "--tp", "x", "--pp", "2", "-N", "1", "--wrap", "true"], 1,
     "--tp='x': arnold-sbatch needs one whole number"),
    (["arnold-sbatch", "--tp", "8", "--pp", "2", "--global-batch", "1e3", "-N", "1", "--wrap",
      "true"], 1, "--global-batch='1e3'"),
])
def test_what_needs_no_cluster_is_checked_before_asking_it(
        argv: list[str], code: int, message: str, tmp_path: Path) -> None:
    # SLURM_CONF names a file that does not exist: asking Slurm would be a different error.
    env = dict(os.environ, SLURM_CONF=str(tmp_path / "nope" / "slurm.conf"),
               ARNOLD_CONFIG=str(tmp_path / "user.toml"))
    proc = subprocess.run([str(Path(sys.executable).parent / argv[0]), *argv[1:]],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == code, proc.stderr
    assert message in proc.stderr and "SLURM_CONF" not in proc.stderr
    assert "Traceback" not in proc.stderr


def test_usage_error_exits_2() -> None:
    result = CliRunner().invoke(main, ["topology", "show", "--no-such-flag"])
    assert result.exit_code == 2


def test_offline_topology_json(tmp_path: Path, isolated_config: Path) -> None:
    path = tmp_path / "t.conf"
    path.write_text(TOPO)
    result = CliRunner().invoke(main, ["topology", "show", "--topology", str(path),
                                       "--gpus-per-node", "4", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert [n["name"] for n in doc["nodes"]] == ["x1", "x2", "x3", "x4"]
    assert {n["minipod"] for n in doc["nodes"]} == {"c"}
    assert all(n["gpus_free"] == 4 for n in doc["nodes"])
    switches = {s["name"]: s for s in doc["switches"]}
    assert switches["c"]["children"] == ["l0", "l1"] and switches["c"]["parent"] is None
    assert switches["l1"]["children"] == ["x3", "x4"]


def _run_arnold(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "arnold"
    return subprocess.run([str(exe), *args], capture_output=True, text=True,
                          env=env if env is not None else dict(os.environ))


def test_bad_topology_file_is_one_line_exit_1(tmp_path: Path) -> None:
    path = tmp_path / "t.conf"
    path.write_text("SwitchName=l0 Nodes=x1\nSwitchName=l1 Nodes=x1\n")
    proc = _run_arnold("topology", "show", "--topology", str(path))
    assert proc.returncode == 1
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert lines == [f"arnold: error: {path}:2: node x1 is under two leaf switches: l0 and l1"]


def test_missing_slurm_conf_says_how_to_fix(tmp_path: Path) -> None:
    env = dict(os.environ, SLURM_CONF=str(tmp_path / "nope" / "slurm.conf"),
               ARNOLD_CONFIG=str(tmp_path / "none.toml"))
    proc = _run_arnold("topology", "show", env=env)
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"arnold: error: SLURM_CONF={tmp_path}/nope/slurm.conf does "
                                  "not exist;")
    assert len(proc.stderr.strip().splitlines()) == 1
    env["SLURM_CONF"] = ""  # Slurm itself would retry for a minute on an empty one
    proc = _run_arnold("topology", "show", env=env)
    assert proc.returncode == 1
    assert proc.stderr.startswith("arnold: error: SLURM_CONF is set but empty;")


@pytest.mark.live
def test_live_topology_show_json(slurm: Slurm, slurm_conf_dir: Path) -> None:
    proc = _run_arnold("topology", "show", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    names = [n["name"] for n in doc["nodes"]]
    assert sorted(names) == sorted(n.name for n in tree_nodes(slurm))
    assert all("[" not in n for n in names)  # hostlists expanded
    busy = {n["name"] for n in doc["nodes"] if not n["free"]}
    assert all(n["gpus_free"] == (0 if n["name"] in busy else n["gpus_total"])
               for n in doc["nodes"])
    kinds = {s["kind"] for s in doc["switches"]}
    assert kinds == {"core", "minipod", "leaf"}
    text = _run_arnold("topology", "show")
    assert text.returncode == 0
    assert "GPUs free" in text.stdout and "(minipod)" in text.stdout


def test_place_explain_draws_ours_beside_slurms(tmp_path: Path, isolated_config: Path) -> None:
    """On a fragmented tree, --explain tables both layouts with their spreads and draws
    them; a .png name gives PNG, anything else SVG."""
    from benchmarks.sim import fat_tree

    topo = tmp_path / "topology.conf"
    topo.write_text(fat_tree(4, 4, 4))  # n00..n63, 16 nodes a minipod
    free = tmp_path / "free.txt"
    # pod 0 has 10 free nodes spread over its leaves; pods 1-3 have 12 in whole leaves.
    free.write_text("n[00-02,04-06,08-09,12-13]\nn[16-27]\nn[32-43]\nn[48-59]\n")
    svg = tmp_path / "explain.svg"
    result = CliRunner().invoke(main, ["place", "--topology", str(topo), "--free", str(free),
                                       "--tp", "8", "--pp", "4", "--dp", "3", "--explain",
                                       "--picture", str(svg), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    ours, theirs = doc["metrics"], doc["explain"]["slurm"]["metrics"]
    assert doc["explain"]["slurm"]["algo"] == "slurm (modelled)"
    assert ours["weighted_spread"] <= theirs["weighted_spread"]
    assert svg.read_text().lstrip().startswith("<?xml") and "<svg" in svg.read_text()
    png = tmp_path / "explain.png"
    text = CliRunner().invoke(main, ["place", "--topology", str(topo), "--free", str(free),
                                     "--tp", "8", "--pp", "4", "--dp", "3", "--explain",
                                     "--picture", str(png)])
    assert text.exit_code == 0, text.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "slurm (modelled): max DP spread" in text.output
    assert f"picture: {png}" in text.output
    # The spelling arnold-sbatch uses: --explain=PATH.
    inline = tmp_path / "inline.svg"
    same = CliRunner().invoke(main, ["place", "--topology", str(topo), "--free", str(free),
                                     "--tp", "8", "--pp", "4", "--dp", "3",
                                     f"--explain={inline}", "--json"])
    assert same.exit_code == 0, same.output
    assert json.loads(same.output)["explain"]["picture"] == str(inline)
    assert "<svg" in inline.read_text()


def test_place_does_not_load_the_other_command_groups() -> None:
    """arnold place and arnold-sbatch pay only for what they use: the command modules of
    COMMANDS are imported when invoked, not when ``arnold`` starts."""
    from slurm_arnold.cli.main import COMMANDS

    modules = [target.partition(":")[0] for target in COMMANDS.values()]
    probe = ("import sys, click; from slurm_arnold.cli.main import main; "
             f"print(','.join(m for m in {modules!r} if m in sys.modules)); "
             "main.get_command(click.Context(main), 'place'); "
             f"print(','.join(m for m in {modules!r} if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            check=True).stdout.splitlines()
    assert loaded == ["", "slurm_arnold.cli.place"]
    assert set(COMMANDS) <= set(main.list_commands(click.Context(main)))


def test_place_time_limit_counts_from_the_command_not_the_import(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A clock an hour past the module's import (a long-lived process running the command
    # again): the search must still get nearly the whole --time-limit, not the 0.1 s floor.
    import time

    from benchmarks.sim import fat_tree
    from slurm_arnold.placement import place

    real = time.monotonic
    monkeypatch.setattr("slurm_arnold.cli.place.time.monotonic", lambda: real() + 3600.0)
    given: list[float] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        given.append(kwargs["time_limit"])
        return place(*args, **kwargs)

    monkeypatch.setattr("slurm_arnold.cli.place.place", spy)
    topo = tmp_path / "topology.conf"
    topo.write_text(fat_tree(4, 4, 4))
    result = CliRunner().invoke(main, ["place", "--topology", str(topo), "--tp", "8", "--pp",
                                       "2", "--dp", "2", "--time-limit", "30"])
    assert result.exit_code == 0, result.output
    assert len(given) == 1 and 20 < given[0] <= 30


@pytest.mark.parametrize("debug", [False, True])
def test_other_libraries_news_stays_out_of_arnold_sbatch_output(debug: bool) -> None:
    # matplotlib logs "generated new fontManager" at INFO on a fresh machine; arnold-sbatch
    # shows its own news at INFO, others' only from WARNING up (all of it with ARNOLD_DEBUG).
    code = ("import logging; from slurm_arnold.cli.sbatch import setup_logging; "
            "setup_logging([]); "
            "logging.getLogger('matplotlib.font_manager').info('generated new fontManager'); "
            "logging.getLogger('matplotlib').warning('a real problem'); "
            "logging.getLogger('slurm_arnold.submit.flow').info('placed on n[001-016]')")
    env = {k: v for k, v in os.environ.items() if k != "ARNOLD_DEBUG"}
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**env, **({"ARNOLD_DEBUG": "1"} if debug else {})}
                         ).stderr
    assert "arnold-sbatch: placed on n[001-016]" in err
    assert "arnold-sbatch: warning: a real problem" in err
    assert ("generated new fontManager" in err) == debug
