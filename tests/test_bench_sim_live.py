"""``arnold bench sim --slurm``: a sweep's replays as a job array on the local cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_arnold.cli.main import main
from slurm_arnold.sim import WALL_CLOCK_KEYS
from slurm_arnold.slurm import Slurm
from tests.test_predictor import KTH

pytestmark = pytest.mark.live


def test_the_job_array_gives_the_same_tables_as_a_run_here(slurm: Slurm,
                                                           tmp_path: Path) -> None:
    if not KTH.exists():
        pytest.skip(f"{KTH} is absent (the shared data is not beside this checkout)")
    argv = ["bench", "sim", "--quick", "--variants", "--logs", "KTH", "--load", "0.9",
            "--json"]
    here = CliRunner().invoke(main, argv)
    assert here.exit_code == 0, here.output
    on_slurm = CliRunner().invoke(main, [*argv, "--slurm", "--workdir", str(tmp_path)])
    assert on_slurm.exit_code == 0, on_slurm.output
    local, remote = (json.loads(r.stdout)["variants"]["KTH"] for r in (here, on_slurm))
    assert [set(r) for r in remote] == [set(r) for r in local]
    # Replays are deterministic: every metric agrees, only the wall-time keys differ.
    assert [{k: v for k, v in r.items() if k not in WALL_CLOCK_KEYS} for r in remote] == \
        [{k: v for k, v in r.items() if k not in WALL_CLOCK_KEYS} for r in local]
    tasks = sorted(tmp_path.glob("result-*.json"))
    assert len(tasks) == len(local)  # one task per replay


def test_a_task_that_fails_is_named_with_its_output(slurm: Slurm, tmp_path: Path) -> None:
    from benchmarks.sim import RunSpec
    from benchmarks.sim_array import run_array
    from slurm_arnold.errors import ArnoldError

    bad = RunSpec("KTH", "slurm", "requested", "share", str(tmp_path / "no-such-dir"))
    with pytest.raises(ArnoldError, match=r"task 0 ended without a result; see .*task-0.out"):
        run_array([bad], slurm, tmp_path, poll_s=0.5, timeout_s=120)
    said = (tmp_path / "task-0.out").read_text()
    assert "error:" in said and "no-such-dir" in said and "Traceback" not in said
