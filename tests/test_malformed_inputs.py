"""Every command against malformed input: exit 1 or 2, one line naming the problem, no
traceback, nothing written. No cluster: SLURM_CONF names a file that does not exist, so a
command that would ask Slurm says so in one line too.

Garbage files of each format a command reads (topology.conf, free lists, SWF, CSV, model and
GPU TOML) come from Hypothesis as well as from a fixed list (empty, binary, a line of noise,
overflowing and not-a-number values); numbers come from a list of bad ones per option.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_arnold.cli.main import main

FIXED_GARBAGE = [
    b"",
    b"\x00\xff\xfe\x00" * 64,
    b"just some words\n",
    b"1 0 0 1e400 8 -1 -1 8 200 -1 1 1 1 -1 1 -1 -1 -1\n",
    b"1 0 0 nan 8 -1 -1 8 inf -1 1 1 1 -1 1 -1 -1 -1\n",
    b"SwitchName=\n",
    b"SwitchName=a Nodes=n[1-\n",
    b"SwitchName=a Switches=a\n",
    b"job_id,user,submit\nx,y,z\n",
    b"layers = [\n",
    "héllo wörld ∞\n".encode(),
]

# One command line per reader of a file; "{f}" is the garbage file.
FILE_READERS = [
    ["topology", "show", "--topology", "{f}"],
    ["place", "--topology", "{f}", "--tp", "8", "--pp", "2", "--nodes", "2"],
    ["place", "--topology", "{topo}", "--free", "{f}", "--tp", "8", "--pp", "2", "--nodes", "2"],
    ["sim", "--policy", "slurm", "--topology", "{topo}", "--swf", "{f}"],
    ["sim", "--policy", "slurm", "--topology", "{topo}", "--csv", "{f}"],
    ["sim", "--policy", "slurm", "--topology", "{f}", "--swf", "{swf}"],
    ["predictor", "evaluate", "--swf", "{f}"],
    ["predictor", "evaluate", "--csv", "{f}"],
    ["predictor", "import", "swf", "{f}"],
    ["predictor", "import", "csv", "{f}"],
    ["plan", "--model", "{f.toml}", "--gpus", "8", "--global-batch", "8"],
    ["plan", "--model", "gpt-1.7b", "--gpu", "{f.toml}", "--gpus", "8", "--global-batch", "8"],
    ["plan", "--model", "gpt-1.7b", "--gpus", "8", "--global-batch", "8", "--topology", "{f}"],
]

# Offline command lines whose numeric options get bad numbers, one option at a time.
NUMBER_USERS = [
    ["place", "--topology", "{topo}", "--tp", "8", "--pp", "2", "--nodes", "2"],
    ["sim", "--policy", "slurm", "--topology", "{topo}", "--swf", "{swf}"],
    ["plan", "--model", "gpt-1.7b", "--gpus", "8", "--global-batch", "8"],
    ["pipeline", "--stages", "4", "--microbatches", "8", "--tf", "1", "--tb", "1", "--tw", "1"],
    ["topology", "show", "--topology", "{topo}"],
]
BAD_NUMBERS = ["nan", "inf", "-inf", "-1", "1e400", "abc", "", "0x10"]

# Commands that ask the live cluster, with no cluster at all.
LIVE_ONLY = [
    ["reserve", "list"], ["reserve", "plan", "1"], ["reserve", "create", "1"],
    ["reserve", "release", "arnold_1"], ["reserve", "sync"], ["predictor", "predict", "--job", "1"],
    ["predictor", "import", "sacct"], ["predictor", "retrain"],
    ["place", "--tp", "8", "--pp", "2", "--nodes", "2"], ["topology", "show"],
    ["pipeline", "--from-job", "1", "--microbatches", "4", "--tf", "1", "--tb", "1", "--tw",
     "1", "--message-bytes", "1M"],
]


@pytest.fixture
def place_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A working directory, config and state of its own, and no cluster."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for name in list(os.environ):
        if name.startswith("ARNOLD_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("ARNOLD_CONFIG", str(tmp_path / "user.toml"))
    monkeypatch.setenv("ARNOLD_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "no-cluster" / "slurm.conf"))
    (tmp_path / "topo.conf").write_text(
        "SwitchName=l0 Nodes=n[1-4]\nSwitchName=l1 Nodes=n[5-8]\nSwitchName=c Switches=l[0-1]\n")
    (tmp_path / "one.swf").write_text("1 0 0 100 8 -1 -1 8 200 -1 1 1 1 -1 1 -1 -1 -1\n")
    yield tmp_path


def _argv(template: list[str], base: Path, garbage: Path | None = None) -> list[str]:
    out = []
    for arg in template:
        if arg == "{f}" and garbage is not None:
            out.append(str(garbage))
        elif arg == "{f.toml}" and garbage is not None:
            toml = garbage.with_suffix(".toml")  # what the planner takes for a file
            if garbage.is_dir():
                toml.mkdir(exist_ok=True)
            elif garbage.exists():
                toml.write_bytes(garbage.read_bytes())
            out.append(str(toml))
        else:
            out.append(arg.replace("{topo}", str(base / "topo.conf"))
                       .replace("{swf}", str(base / "one.swf")))
    return out


def _snapshot(base: Path) -> dict[str, float]:
    """Every path under the test's directory (inputs, working and state dirs), with its
    modification time."""
    return {str(p.relative_to(base)): p.stat().st_mtime_ns for p in base.rglob("*")}


def _check(argv: list[str], base: Path) -> None:
    """The rules: exit 1 or 2, no traceback, one line saying what is wrong, nothing written
    (created or changed) anywhere under the test's directory."""
    before = _snapshot(base)
    result = CliRunner().invoke(main, argv)
    shown = " ".join(argv)
    assert result.exit_code in (1, 2), f"`arnold {shown}` exited {result.exit_code}:\n" \
                                       f"{result.output}"
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"`arnold {shown}` raised {result.exception!r}") \
            from result.exception
    assert "Traceback" not in result.output, f"`arnold {shown}`:\n{result.output}"
    errors = [ln for ln in result.output.splitlines()
              if ln.startswith(("arnold: error:", "Error:"))]
    assert len(errors) == 1, f"`arnold {shown}`: want one error line:\n{result.output}"
    after = _snapshot(base)
    changed = sorted(k for k in after if before.get(k) != after[k])
    assert not changed, f"`arnold {shown}` wrote {changed}"


@pytest.mark.parametrize("content", FIXED_GARBAGE, ids=lambda b: repr(b[:12]))
@pytest.mark.parametrize("template", FILE_READERS, ids=lambda a: " ".join(a[:3]))
def test_garbage_files(template: list[str], content: bytes, place_dir: Path) -> None:
    garbage = place_dir / "garbage.in"
    garbage.write_bytes(content)
    _check(_argv(template, place_dir, garbage), place_dir)


@pytest.mark.parametrize("template", FILE_READERS, ids=lambda a: " ".join(a[:3]))
def test_missing_and_unreadable_files(template: list[str], place_dir: Path) -> None:
    _check(_argv(template, place_dir, place_dir / "absent.in"), place_dir)
    if os.geteuid() != 0:  # root reads anything
        locked = place_dir / "locked.in"
        locked.write_text("x\n")
        locked.chmod(0)
        _check(_argv(template, place_dir, locked), place_dir)
    directory = place_dir / "a-directory"
    directory.mkdir(exist_ok=True)
    _check(_argv(template, place_dir, directory), place_dir)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.one_of(st.binary(max_size=400),
                         st.text(alphabet=st.characters(blacklist_categories=["Cs"]),
                                 max_size=400).map(str.encode)))
@pytest.mark.parametrize("template", FILE_READERS, ids=lambda a: " ".join(a[:3]))
def test_random_files(template: list[str], content: bytes, place_dir: Path) -> None:
    garbage = place_dir / "random.in"
    garbage.write_bytes(content)
    argv = _argv(template, place_dir, garbage)
    result = CliRunner().invoke(main, argv)
    # Random bytes may now and then be a valid file (an empty free list is not, a one-line
    # topology may be): then the command may succeed; it must never crash.
    assert result.exit_code in (0, 1, 2), result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"`arnold {' '.join(argv)}` raised {result.exception!r}") \
            from result.exception
    assert "Traceback" not in result.output


def _numeric_options(argv: list[str]) -> list[str]:
    cmd: click.Command = main
    for word in argv:
        sub = cmd.get_command(click.Context(cmd), word) if isinstance(cmd, click.Group) \
            else None
        if sub is not None:
            cmd = sub
    return [p.opts[0] for p in cmd.params if isinstance(p, click.Option)
            and isinstance(p.type, click.types._NumberParamTypeBase)]


@pytest.mark.parametrize("template", NUMBER_USERS, ids=lambda a: a[0])
def test_bad_numbers(template: list[str], place_dir: Path) -> None:
    for option in _numeric_options(template):
        for value in BAD_NUMBERS:
            if option == "--seed" and value == "-1":
                continue  # any integer is a seed
            _check([*_argv(template, place_dir), option, value], place_dir)


@pytest.mark.parametrize("argv", LIVE_ONLY, ids=lambda a: " ".join(a[:2]))
def test_commands_that_need_the_cluster_say_so_in_one_line(argv: list[str],
                                                           place_dir: Path) -> None:
    _check(argv, place_dir)


@pytest.mark.parametrize("argv", [["jobs"], ["jobs", "--json"], ["site", "show"]],
                         ids=lambda a: " ".join(a))
def test_listings_need_no_cluster_and_make_nothing(argv: list[str], place_dir: Path) -> None:
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 0, result.output
    assert not (place_dir / "state").exists() and not list((place_dir / "work").iterdir())
