"""NVLink domains live (issue 23): Slurm 26.05's topology/block partition of the local cluster.

The 26.05 lane adds partition ``nvl``: 8 nodes of 4 GPUs in two blocks of 4 (its own
topology in topology.yaml, beside the fat tree; ``site_config/devcluster``). A job with TP 8
needs two nodes per TP group; each group must land in one block, with ranks from the plugin.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_arnold.slurm import Slurm
from tests.conftest import wait_for_job

pytestmark = pytest.mark.live
BIN = Path(sys.executable).parent
PARTITION = "nvl"
REPORT = 'echo "$SLURMD_NODENAME $RANK $ARNOLD_TP_RANK $ARNOLD_PP_RANK $ARNOLD_DP_RANK"'


@pytest.fixture(scope="module")
def nvl(slurm: Slurm) -> dict[str, str]:
    """node -> block of the nvl partition, as `arnold topology show` reads it live."""
    proc = subprocess.run(["sinfo", "-h", "-p", PARTITION, "-o", "%N"], capture_output=True,
                          text=True)
    if not proc.stdout.strip():
        pytest.skip(f"no partition {PARTITION} on this cluster: topology/block needs Slurm "
                    "25.05+ (make test SLURM=26.05 has it)")
    show = subprocess.run([str(BIN / "arnold"), "topology", "show", "--partition", PARTITION,
                           "--json"], capture_output=True, text=True, timeout=60)
    assert show.returncode == 0, show.stderr
    doc = json.loads(show.stdout)
    assert doc["block_sizes"] == [4, 8]  # read from scontrol: blocks and the aggregated one
    assert {d["name"]: d["nodes"] for d in doc["domains"]} == {"nvlblock0": 4, "nvlblock1": 4}
    return {n["name"]: n["domain"] for n in doc["nodes"]}


@pytest.fixture
def blockers(slurm: Slurm, nvl: dict[str, str]) -> Iterator[list[int]]:
    """One busy node in each block (nvl01, nvl05): three free nodes per block, so a job of
    four needs both blocks, and node order alone would pair nvl04 with nvl06."""
    ids = []
    for node in ("nvl01", "nvl05"):
        out = subprocess.run(["sbatch", "--parsable", "-p", PARTITION, "-w", node, "-N", "1",
                              "--exclusive", "-t", "5", "-o", "/dev/null", "--wrap",
                              "sleep 300"], capture_output=True, text=True, check=True)
        ids.append(int(out.stdout.strip().split(";")[0]))
    deadline = time.monotonic() + 60
    while {j.job_id: j.state for j in slurm.jobs()}.get(ids[-1]) != "RUNNING" or \
            {j.job_id: j.state for j in slurm.jobs()}.get(ids[0]) != "RUNNING":
        assert time.monotonic() < deadline, "the blocking jobs did not start within 60 s"
        time.sleep(0.2)
    try:
        yield ids
    finally:
        subprocess.run(["scancel", *map(str, ids)], check=False)


def test_tp_groups_span_two_nodes_of_one_block_with_ranks_from_the_plugin(
        slurm: Slurm, nvl: dict[str, str], blockers: list[int], tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text(f"""#!/bin/bash
#SBATCH -p {PARTITION} -N 4 --ntasks-per-node=4 --gpus-per-node=4 --exclusive -t 5
#SBATCH -o {tmp_path}/out-%j.txt
#ARNOLD --tp 8 --pp 1
srun --arnold-rankfile=auto bash -c '{REPORT}'
""")
    proc = subprocess.run([str(BIN / "arnold-sbatch"), "--parsable", str(script)],
                          capture_output=True, text=True, env=dict(os.environ), timeout=120)
    assert proc.returncode == 0, proc.stderr
    job_id = int(proc.stdout)
    assert wait_for_job(slurm, job_id) == "COMPLETED"
    assert re.search(r"placed on nvl\[", proc.stderr), proc.stderr
    lines = [ln.split() for ln in (tmp_path / f"out-{job_id}.txt").read_text().splitlines()]
    assert sorted(int(f[1]) for f in lines) == list(range(16))
    groups: dict[tuple[int, int], set[str]] = {}
    for node, rank, tp, pp, dp in lines:
        assert int(rank) == int(tp) + 8 * int(dp)  # TP fastest, then DP (PP is 1)
        assert node not in ("nvl01", "nvl05")
        groups.setdefault((int(pp), int(dp)), set()).add(node)
    assert len(groups) == 2
    for nodes in groups.values():
        assert len(nodes) == 2 and len({nvl[n] for n in nodes}) == 1, groups


def test_a_segment_of_two_stages_lands_in_one_block_with_ranks_from_the_plugin(
        slurm: Slurm, nvl: dict[str, str], tmp_path: Path) -> None:
    """TP 8 x PP 2 on 4-GPU nodes with --segment=4: one replica, so the segment holds two
    consecutive stages. With nvl01 busy only block 2 has four free nodes; the same job with
    its groups placed one by one would take the partly used block first and split the
    segment (arnold-sbatch would then refuse it)."""
    out = subprocess.run(["sbatch", "--parsable", "-p", PARTITION, "-w", "nvl01", "-N", "1",
                          "--exclusive", "-t", "5", "-o", "/dev/null", "--wrap", "sleep 300"],
                         capture_output=True, text=True, check=True)
    blocker = int(out.stdout.strip().split(";")[0])
    try:
        deadline = time.monotonic() + 60
        while (info := slurm.job(blocker)) is None or info.state != "RUNNING":
            assert time.monotonic() < deadline, "the blocking job did not start within 60 s"
            time.sleep(0.2)
        script = tmp_path / "job.sh"
        script.write_text(f"""#!/bin/bash
#SBATCH -p {PARTITION} -N 4 --ntasks-per-node=4 --gpus-per-node=4 --exclusive -t 5
#SBATCH -o {tmp_path}/out-%j.txt
#ARNOLD --tp 8 --pp 2
srun --arnold-rankfile=auto bash -c '{REPORT}'
""")
        proc = subprocess.run([str(BIN / "arnold-sbatch"), "--parsable", "--segment=4",
                               str(script)], capture_output=True, text=True,
                              env=dict(os.environ), timeout=120)
        assert proc.returncode == 0, proc.stderr
        job_id = int(proc.stdout)
        assert wait_for_job(slurm, job_id) == "COMPLETED"
    finally:
        subprocess.run(["scancel", str(blocker)], check=False)
    lines = [ln.split() for ln in (tmp_path / f"out-{job_id}.txt").read_text().splitlines()]
    assert sorted(int(f[1]) for f in lines) == list(range(16))
    stages: dict[int, set[str]] = {}
    for node, rank, tp, pp, dp in lines:
        assert int(rank) == int(tp) + 8 * int(pp) and dp == "0"  # TP fastest, then PP
        stages.setdefault(int(pp), set()).add(node)
    assert all(len(nodes) == 2 for nodes in stages.values()), stages
    assert len({nvl[n] for n in stages[0] | stages[1]}) == 1, stages


def test_without_the_segment_slurm_refuses_the_same_nodes(
        slurm: Slurm, nvl: dict[str, str], blockers: list[int]) -> None:
    """Why arnold-sbatch passes --segment: the plugin will not spread a job no larger than a
    block over two blocks otherwise. If a later Slurm accepts it, this test says so."""
    plain = subprocess.run(["sbatch", "--test-only", "-p", PARTITION, "-N", "4",
                            "-w", "nvl[02-03,06-07]", "--wrap", "true"],
                           capture_output=True, text=True)
    assert plain.returncode != 0 and "configuration is not available" in plain.stderr
    segmented = subprocess.run(["sbatch", "--test-only", "-p", PARTITION, "-N", "4",
                                "--segment=2", "-w", "nvl[02-03,06-07]", "--wrap", "true"],
                               capture_output=True, text=True)
    assert segmented.returncode == 0, segmented.stderr


@pytest.mark.parametrize(("nodes", "segment"), [(1, 1), (2, 2), (2, 1), (3, 1), (3, 3), (4, 2),
                                                (4, 1), (5, 1), (6, 1), (5, None),
                                                (6, None)])
def test_the_offline_block_rule_is_slurms_own_choice(
        slurm: Slurm, nvl: dict[str, str], blockers: list[int], nodes: int,
        segment: int | None) -> None:
    """The block rule that `arnold bench placement --nvl` compares with, against what
    slurmctld's topology/block answers for the same job now (three free nodes per block:
    every case here fits now, so sbatch --test-only names free nodes, not ones it waits
    for). The ties (equal blocks) are what told the model that Slurm takes the last one."""
    import hostlist

    from slurm_arnold.placement.baselines import block_rule
    from slurm_arnold.snapshot.live import live_cluster

    view = live_cluster(slurm, partition=PARTITION)
    assert view.free == {f"nvl0{i}" for i in (2, 3, 4, 6, 7, 8)}
    ours = block_rule(view.topology, sorted(view.free), nodes, segment, release=slurm.version())
    theirs = slurm.test_only(["-p", PARTITION, "-N", str(nodes), "--exclusive",
                              *([f"--segment={segment}"] if segment else [])])
    assert ours is not None
    assert hostlist.collect_hostlist(ours) == hostlist.collect_hostlist(theirs)


def test_placing_with_slurms_own_choice_works_on_a_block_partition(
        slurm: Slurm, nvl: dict[str, str], blockers: list[int]) -> None:
    """`arnold place --algo slurm` asks slurmctld as a user would: one TP group per segment.
    Without the segment this job (four nodes, no block with four free) is given a whole block
    later, when its busy node frees (measured: nvl[05-08])."""
    proc = subprocess.run([str(BIN / "arnold"), "place", "--algo", "slurm", "--partition",
                           PARTITION, "--tp", "8", "--pp", "1", "--dp", "2", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    nodes = sorted({e["node"] for e in doc["assignment"]})
    assert len(nodes) == 4 and not {"nvl01", "nvl05"} & set(nodes)
    # Two nodes in each block: Slurm placed whole two-node segments.
    assert sorted(nvl[n] for n in nodes) == ["nvlblock0"] * 2 + ["nvlblock1"] * 2
