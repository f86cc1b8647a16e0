"""Two login nodes submitting at once: two site installs (the cluster's site venv, and this
checkout's own), each in its own UTS namespace (its own host name, as two login nodes have),
sharing one state directory. The submit lock is the only thing between them: no two jobs may
be given the same nodes (docs/site.md, "Several login nodes").

A real network file system cannot run here (this machine's kernel has no NFS client); the two
installs share the state over the local file system, so ``flock`` is the same lock either way
only where NFS locking is on, which docs/site.md requires."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.multiuser import USERS, as_user, overlapping, run_at_once, site_venv
from site_config import SiteConfig
from slurm_arnold.slurm import Slurm

pytestmark = pytest.mark.live

SHAPE = ["--parsable", "--hold", "-N", "4", "--ntasks-per-node=8", "--gpus-per-node=8",
         "--exclusive", "-t", "3", "-o", "/dev/null", "--tp", "8", "--pp", "2", "--wrap",
         "true"]


def _on_host(name: str, argv: list[str]) -> list[str]:
    """``argv`` run in a new UTS namespace whose host name is ``name``."""
    return ["unshare", "--uts", "/bin/sh", "-c", f'hostname {name} && exec "$@"', "sh", *argv]


def test_two_login_nodes_with_their_own_installs_never_give_the_same_nodes_twice(
        slurm: Slurm, site: SiteConfig) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) to give each login node its own host name")
    here = Path(sys.executable).parent / "arnold-sbatch"
    there = site_venv() / "bin" / "arnold-sbatch"
    assert here.exists() and there.exists()
    assert here.resolve() != there.resolve()  # two installs, not one
    commands = [(u, _on_host("login1", as_user(u, [str(there), *SHAPE])))
                for u in USERS for _ in range(3)]
    commands += [("root", _on_host("login2", [str(here), *SHAPE])) for _ in range(3)]
    results = run_at_once(commands)
    ids = [r.job_id for r in results if r.job_id is not None]
    try:
        for r in results:
            assert r.returncode == 0 and r.job_id is not None, (r.user, r.stderr)
        assert len(ids) == 12
        assert overlapping(slurm, ids) == []
    finally:
        for job_id in ids:
            subprocess.run(["scancel", str(job_id)], capture_output=True)
