"""``make cluster`` is idempotent: a second start reuses the running daemons."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_arnold.slurm import Slurm

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "site_config" / "devcluster" / "devcluster.py"
#: The lane the tests run on (``source devcluster-26.05.env`` sets it); 22.05 otherwise.
LANE = os.environ.get("ARNOLD_DEV_SLURM", "22.05")
SUFFIX = "" if LANE == "22.05" else f"-{LANE}"
RUN = REPO / f".devcluster{SUFFIX}"


@pytest.mark.live
def test_second_up_restarts_nothing(slurm: Slurm) -> None:
    if not (RUN / "slurmctld.pid").exists():
        pytest.skip("the running cluster was not started from this checkout")
    before = {p.name: p.read_text() for p in RUN.glob("*.pid")}
    proc = subprocess.run([sys.executable, str(SCRIPT), "up"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    after = {p.name: p.read_text() for p in RUN.glob("*.pid")}
    assert before == after
    env = (REPO / f"devcluster{SUFFIX}.env").read_text().splitlines()
    run = RUN.resolve()
    assert env[0] == f"export SLURM_CONF={run / 'etc' / 'slurm.conf'}"
    assert f"export PATH=$PATH:{run / 'venv' / 'bin'}" in env[1]  # the site install, last
    assert all(n.state == "IDLE" or n.gpus_used > 0 for n in slurm.nodes())
    assert slurm.version() == tuple(int(x) for x in LANE.split("."))


def test_the_built_lane_says_where_to_put_slurms_source(tmp_path: Path) -> None:
    # No tarball and no build: one line naming the directory to put SchedMD's tarball in.
    env = {**os.environ, "ARNOLD_DEV_SLURM_SOURCES": str(tmp_path / "vendor"),
           "ARNOLD_DEV_SLURM_BUILD": str(tmp_path / "slurm-25.11")}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--slurm", "25.11", "root"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert "slurm-25.11.N.tar.xz" in lines[0] and str(tmp_path / "vendor") in lines[0]
    assert not (tmp_path / "slurm-25.11").exists()
