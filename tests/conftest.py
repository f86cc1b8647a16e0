"""Shared fixtures. Tests marked ``live`` run against the real local Slurm cluster.

``make test`` starts that cluster and exports ``SLURM_CONF``; without ``SLURM_CONF`` the live
tests are skipped with a message, and with it a cluster that does not answer is a failure.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slurm_arnold.slurm import NodeInfo, Slurm

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def slurm() -> Slurm:
    """The adapter, bound to the running local cluster."""
    if not os.environ.get("SLURM_CONF"):
        pytest.skip("no local cluster: run `make cluster` and `source devcluster.env`")
    adapter = Slurm()
    adapter.version()  # fails the test (not skips) when the cluster does not answer
    proc = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True)
    assert proc.returncode == 0, f"sinfo failed: {proc.stderr}"
    return adapter


@pytest.fixture(scope="session")
def slurm_conf_dir(slurm: Slurm) -> Path:
    """The directory of the running cluster's slurm.conf (and topology.conf)."""
    return Path(os.environ["SLURM_CONF"]).parent


@pytest.fixture(scope="session")
def site(slurm: Slurm) -> Any:
    """The site's config as the admin side (root) reads it, with the test users made
    (``benchmarks.multiuser.USERS``): for the tests that run commands as real Unix users
    through the site install that ``make cluster`` makes."""
    from benchmarks import multiuser
    from site_config import load_config

    if os.geteuid() != 0:
        pytest.skip("these tests make Unix users and act as the admin side: run them as root "
                    "(make test does)")
    venv = multiuser.site_venv()
    if not (venv / "bin" / "arnold-sbatch").exists():
        pytest.fail(f"no site install at {venv}: `make cluster` makes it")
    multiuser.ensure_users()
    return load_config()


@pytest.fixture
def isolated_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """No site or user config and no ARNOLD_* variables leak into a test."""
    for name in list(os.environ):
        if name.startswith("ARNOLD_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("ARNOLD_CONFIG", str(tmp_path / "user.toml"))
    yield tmp_path


def tree_nodes(slurm: Slurm) -> list[NodeInfo]:
    """The nodes of the cluster's default partition: the fat tree the tests place on (the
    26.05 lane also has partition ``nvl``, whose nodes are in no switch of it)."""
    partition = slurm.default_partition()
    return [n for n in slurm.nodes() if partition in n.partitions]


TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "BOOT_FAIL", "DEADLINE", "PREEMPTED"}


def wait_for_job(slurm: Slurm, job_id: int, timeout: float = 120.0) -> str:
    """Wait until slurmctld reports the job finished; return its final state."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = {j.job_id: j.state for j in slurm.jobs()}.get(job_id)
        if state in TERMINAL:
            return state
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} did not finish within {timeout} s")


@pytest.fixture(scope="session")
def rankorder_check() -> Path:
    """The C parser's check tool (``make -C spank rankorder-check``: the parser needs no Slurm
    headers, only a C compiler; without one the C-parser tests skip)."""
    import shutil

    if shutil.which("make") is None or shutil.which("gcc") is None:
        pytest.skip("no C compiler: apt-get install gcc make")
    proc = subprocess.run(["make", "-s", "-C", str(REPO / "spank"), "rankorder-check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return REPO / "spank" / "rankorder-check"
