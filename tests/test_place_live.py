"""``arnold place`` against the live cluster, including ``--algo slurm``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import hostlist
import pytest

from slurm_arnold.slurm import Slurm

pytestmark = pytest.mark.live
ARNOLD = str(Path(sys.executable).parent / "arnold")


@pytest.fixture
def busy_nodes(slurm: Slurm) -> Iterator[tuple[int, list[str]]]:
    job = slurm.submit(["-N", "6", "--exclusive", "-t", "5", "-J", "arnold-occupy", "-o",
                        "/dev/null"], "#!/bin/bash\nsleep 300\n")
    deadline = time.monotonic() + 60
    while True:
        info = {j.job_id: j for j in slurm.jobs()}[job]
        if info.state == "RUNNING":
            break
        assert time.monotonic() < deadline, "occupying job did not start"
        time.sleep(0.3)
    yield job, list(info.nodes)
    slurm.cancel(job)


def _place(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ARNOLD, "place", *args], capture_output=True, text=True,
                          env=dict(os.environ))


def test_slurm_and_mip_avoid_busy_nodes(slurm: Slurm, busy_nodes: tuple[int, list[str]]) -> None:
    _, busy = busy_nodes
    for algo in ("slurm", "mip", "topo-aware"):
        proc = _place("--tp", "8", "--pp", "4", "--nodes", "16", "--algo", algo, "--json")
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        nodes = {e["node"] for e in doc["assignment"]}
        assert len(nodes) == 16
        assert not nodes & set(busy), (algo, busy)
        assert doc["algo"] == algo
    # what sbatch --test-only says is what the adapter parsed
    raw = subprocess.run(["sbatch", "--test-only", "-N", "16", "--exclusive", "--wrap", "true"],
                         capture_output=True, text=True)
    said = raw.stderr.split(" on nodes ")[1].split()[0]
    assert slurm.test_only(["-N", "16", "--exclusive"]) == hostlist.expand_hostlist(said)
