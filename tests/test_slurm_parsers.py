"""Parsers of the Slurm adapter on fixed text (the live tests check them against real Slurm)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_arnold.errors import SlurmConfMissing, SlurmError, SlurmNotFound
from slurm_arnold.slurm import Slurm, parse_gpu_count, parse_oneliner


@pytest.mark.parametrize(
    ("gres", "count"),
    [("gpu:8", 8), ("gpu:a100:4(S:0-1)", 4), ("gpu:2(IDX:0,2)", 2), ("gpu:a100:2,gpu:v100:1", 3),
     ("mps:100,gpu:4", 4), ("(null)", 0), ("", 0), (None, 0), ("gpu:0", 0), ("mps:8", 0)],
)
def test_gpu_count(gres: str | None, count: int) -> None:
    assert parse_gpu_count(gres) == count


def test_oneliner_keeps_values_with_spaces() -> None:
    f = parse_oneliner("NodeName=n1 OS=Linux 6.1 #1 SMP  RealMemory=10 State=IDLE+DRAIN")
    assert f["OS"] == "Linux 6.1 #1 SMP"
    assert f["State"] == "IDLE+DRAIN"


def test_missing_command_is_typed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SlurmNotFound, match="`sinfo` not found"):
        Slurm().version()


def test_failure_carries_command_code_and_stderr(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    # A slurm.conf the real sinfo cannot parse: it fails before it contacts anything.
    conf = tmp_path / "slurm.conf"
    conf.write_text("ThisIsNot=AValidKey\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    with pytest.raises(SlurmError) as err:
        Slurm().nodes()
    assert err.value.command[0] == "sinfo"
    assert err.value.returncode != 0
    assert "ThisIsNot" in err.value.stderr


def test_a_missing_slurm_conf_is_named_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Slurm's own commands would spend a minute looking for a configless controller.
    monkeypatch.setenv("SLURM_CONF", "/nonexistent/slurm.conf")
    with pytest.raises(SlurmConfMissing, match=r"SLURM_CONF=/nonexistent/slurm\.conf does not"):
        Slurm().nodes()


def test_parse_test_only_line() -> None:
    from slurm_arnold.errors import SlurmOutputError
    from slurm_arnold.slurm import parse_test_only

    line = ("sbatch: Job 8 to start at 2026-11-29T09:19:03 using 256 processors on nodes "
            "n[001-003,010] in partition gpu\n")
    assert parse_test_only(line) == ["n001", "n002", "n003", "n010"]
    with pytest.raises(SlurmOutputError):
        parse_test_only("allocation failure: Requested node configuration is not available")
