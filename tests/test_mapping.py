"""The mapping of a job onto a fixed allocation, and what arnold-prolog reads (no Slurm)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from benchmarks.clusters import SCALES, build_tree, fragment
from slurm_arnold.errors import ArnoldError, InfeasibleError
from slurm_arnold.placement import JobShape, place
from slurm_arnold.placement.mapping import SLURM_ORDER, map_allocation, slurm_order
from slurm_arnold.prolog import rankfile_nodes, starting_job, wanted_from_script
from slurm_arnold.rankorder import write_files
from slurm_arnold.topology import parse_topology

FOUR_PODS = parse_topology("".join(
    f"SwitchName=leaf{p} Nodes=n[{p * 4 + 1:03d}-{p * 4 + 4:03d}]\n" for p in range(4))
    + "".join(f"SwitchName=pod{p} Switches=leaf{p}\n" for p in range(4))
    + "SwitchName=core Switches=pod[0-3]\n", "four pods")


@pytest.mark.parametrize("seed", range(12))
def test_never_worse_than_slurms_order_in_either_spread(seed: int) -> None:
    rng = random.Random(seed)
    topo = build_tree(SCALES["1k"], rng)
    free = fragment(topo, 0.6, rng)
    tp, pp = rng.choice([(8, 2), (8, 4), (4, 4), (16, 2)])
    nodes = rng.choice([8, 16, 24, 32])
    job = JobShape.from_nodes(nodes, tp, pp, 8)
    allocation = rng.sample(free, job.nodes)
    result = map_allocation(topo, allocation, job, alpha=rng.choice([0.25, 0.5, 0.75]))
    assert set(result.chosen.nodes()) == set(allocation)
    assert result.default.algo == SLURM_ORDER
    mine, theirs = result.chosen.metrics, result.default.metrics
    assert mine.max_dp_spread <= theirs.max_dp_spread
    assert mine.max_pp_spread <= theirs.max_pp_spread


def test_a_better_weighted_mapping_that_worsens_one_spread_is_not_taken() -> None:
    # Two nodes in each of four minipods, TP 8 x PP 2 x DP 4. Slurm's block order: DP 2, PP 2.
    # With pipelines weighted up, every pipeline inside one minipod (PP 1) would cost DP 4
    # and weigh less; it is worse in DP, so the answer stays within DP 2, PP 2.
    allocation = ["n001", "n002", "n005", "n006", "n009", "n010", "n013", "n014"]
    job = JobShape.from_nodes(8, 8, 2, 8)
    free_choice = place(FOUR_PODS, allocation, job, alpha=0.25)
    assert (free_choice.metrics.max_dp_spread, free_choice.metrics.max_pp_spread) == (4, 1)
    result = map_allocation(FOUR_PODS, allocation, job, alpha=0.25)
    assert (result.default.metrics.max_dp_spread, result.default.metrics.max_pp_spread) == (2, 2)
    assert result.chosen.metrics.max_dp_spread <= 2 and result.chosen.metrics.max_pp_spread <= 2


def test_fragmented_allocations_are_mostly_mapped_better_than_slurms_order() -> None:
    better = 0
    for seed in range(12):
        rng = random.Random(seed)
        topo = build_tree(SCALES["1k"], rng)
        free = fragment(topo, 0.6, rng)
        job = JobShape.from_nodes(16, 8, 4, 8)
        result = map_allocation(topo, rng.sample(free, job.nodes), job)
        better += result.chosen.metrics.weighted_spread < result.default.metrics.weighted_spread
    assert better >= 6, better  # most of them (9 of 12 when written)


def test_the_allocation_must_fit_the_shape() -> None:
    job = JobShape.from_nodes(4, 8, 2, 8)
    with pytest.raises(InfeasibleError, match="needs 4 nodes; the job has 3"):
        map_allocation(FOUR_PODS, ["n001", "n002", "n003"], job)
    with pytest.raises(InfeasibleError, match="twice"):
        map_allocation(FOUR_PODS, ["n001", "n001", "n002", "n003"], job)
    with pytest.raises(InfeasibleError, match="not in the topology"):
        map_allocation(FOUR_PODS, ["n001", "n002", "n003", "x9"], job)


def test_tp_across_nodes_without_a_leaf_to_hold_it_keeps_slurms_order() -> None:
    # TP 16 on 8-GPU nodes needs two nodes of one leaf per unit; one node per leaf has none.
    allocation = ["n001", "n005", "n009", "n013"]
    job = JobShape.from_nodes(4, 16, 2, 8)
    result = map_allocation(FOUR_PODS, allocation, job)
    assert result.chosen is result.default and result.note
    assert result.chosen.nodes() == slurm_order(FOUR_PODS, allocation, job, 0.5).nodes()


SCRIPT = """#!/bin/bash
#SBATCH -N 8
#ARNOLD --tp 8 --pp 2   # a comment
#ARNOLD --alpha 0.3 --rank-order tp-pp-dp
srun --arnold-rankfile=auto train.py
#ARNOLD --tp 1
"""


def test_arnold_lines_of_a_plain_script() -> None:
    wanted = wanted_from_script(SCRIPT)
    assert wanted is not None
    assert (wanted.tp, wanted.pp, wanted.alpha, wanted.rank_order) == (8, 2, 0.3, "tp-pp-dp")
    assert wanted.source == "#ARNOLD lines" and wanted.user_rankfile is None
    assert wanted_from_script("#!/bin/bash\n#SBATCH -N 2\nsrun true\n") is None
    assert wanted_from_script("#!/bin/sh\n#ARNOLD --tp 8 --pp 2 --placement slurm\n") is None
    auto = wanted_from_script("#!/bin/sh\n#ARNOLD --tp 8 --pp 2 --align auto\n")
    assert auto is not None and auto.alpha == 0.25


@pytest.mark.parametrize(("lines", "message"), [
    ("#ARNOLD --tp 8\n", "both --tp and --pp"),
    ("#ARNOLD --tp eight --pp 2\n", "--tp 'eight' is not a positive whole number"),
    ("#ARNOLD --tp 8 --pp 0\n", "--pp '0' is not a positive whole number"),
    ("#ARNOLD --tp 8 --pp 2 --alpha 2\n", "outside"),
    ("#ARNOLD --tp 8 --pp 2 --frobnicate\n", "unknown option --frobnicate"),
    ("#ARNOLD --tp '8\n", "#ARNOLD line"),
])
def test_bad_arnold_lines_are_one_clear_error(lines: str, message: str) -> None:
    with pytest.raises(ArnoldError, match=message):
        wanted_from_script("#!/bin/bash\n" + lines)


def test_starting_job_from_the_prolog_environment() -> None:
    job = starting_job({"SLURM_JOB_ID": "42", "SLURM_JOB_UID": "0", "SLURM_JOB_USER": "root",
                        "SLURM_JOB_NODELIST": "n[001-003],n010", "SLURM_JOB_PARTITION": "gpu"})
    assert (job.job_id, job.uid, job.nodes) == (42, 0, ("n001", "n002", "n003", "n010"))
    with pytest.raises(ArnoldError, match="PrologSlurmctld"):
        starting_job({"SLURM_JOB_ID": "42"})
    with pytest.raises(ArnoldError, match="not a host list"):
        starting_job({"SLURM_JOB_ID": "1", "SLURM_JOB_UID": "0",
                      "SLURM_JOB_NODELIST": "n[1-"})


def test_rank_files_are_trusted_as_the_plugin_trusts_them(tmp_path: Path) -> None:
    job = JobShape.from_nodes(4, 8, 2, 8)
    placement = place(FOUR_PODS, ["n001", "n002", "n005", "n006"], job)
    rankfile, _ = write_files(tmp_path, placement, "0123456789abcdef")
    assert rankfile_nodes(rankfile) == {"n001", "n002", "n005", "n006"}
    assert rankfile_nodes(rankfile, uid=os.getuid()) == {"n001", "n002", "n005", "n006"}
    rankfile.chmod(0o666)
    assert rankfile_nodes(rankfile, uid=os.getuid()) is None  # others may write it
    rankfile.chmod(0o644)
    link = tmp_path / "link.rankorder"
    link.symlink_to(rankfile)
    assert rankfile_nodes(link) is None  # never followed
    garbage = tmp_path / "garbage.rankorder"
    garbage.write_text("arnold-rankorder v1\nranks\n0 n001\n")
    assert rankfile_nodes(garbage) is None
    assert rankfile_nodes(tmp_path / "missing.rankorder") is None


def test_the_prolog_wrapper_starts_python_only_for_jobs_that_may_want_ranks(
        tmp_path: Path) -> None:
    import subprocess

    from site_config import SiteConfig
    from slurm_arnold.prolog import wrapper_script

    config = SiteConfig(state_dir=tmp_path / "state")
    marker = tmp_path / "ran"
    fake = tmp_path / "arnold-prolog"
    fake.write_text(f"#!/bin/sh\necho \"$SLURM_JOB_ID\" > {marker}\n")
    fake.chmod(0o755)
    script = tmp_path / "wrapper"
    script.write_text(wrapper_script(config, fake, None))
    script.chmod(0o755)

    def run(job_id: str, user: str) -> bool:
        marker.unlink(missing_ok=True)
        # No cluster answers scontrol here: a job without a spec has no script to read.
        proc = subprocess.run([str(script)], env={"SLURM_JOB_ID": job_id,
                                                  "SLURM_JOB_USER": user}, timeout=30)
        assert proc.returncode == 0
        return marker.exists()

    spec = config.users_dir / "alice" / "specs" / "42.json"
    spec.parent.mkdir(parents=True)
    spec.write_text("{}")
    assert run("42", "alice")  # arnold-sbatch's job: on to arnold-prolog
    assert marker.read_text().strip() == "42"
    assert not run("43", "alice")  # no spec and (here) no script: nothing to do
    assert not run("42", "../alice")  # a name that is not a plain name: nothing at all
    assert not run("", "alice")


def test_the_prolog_wrapper_reaches_the_slurm_it_was_made_for(tmp_path: Path) -> None:
    import subprocess

    from site_config import SiteConfig
    from slurm_arnold.prolog import wrapper_script
    from slurm_arnold.slurm import slurm_commands_dir

    # A site whose Slurm lives outside /usr/bin: its scontrol answers for the wrapper.
    commands = tmp_path / "slurm" / "bin"
    commands.mkdir(parents=True)
    (commands / "scontrol").write_text("#!/bin/sh\nprintf '#!/bin/sh\\n#ARNOLD --tp 2\\n'\n")
    (commands / "scontrol").chmod(0o755)
    assert slurm_commands_dir(f"{commands}:/usr/bin") == str(commands)
    assert slurm_commands_dir("/nonexistent") is None
    config = SiteConfig(state_dir=tmp_path / "state")
    marker, fake = tmp_path / "ran", tmp_path / "arnold-prolog"
    fake.write_text(f"#!/bin/sh\necho \"$PATH\" > {marker}\n")
    fake.chmod(0o755)
    for slurm_bin, reached in ((commands, True), (None, False)):
        marker.unlink(missing_ok=True)
        script = tmp_path / "wrapper"
        script.write_text(wrapper_script(config, fake, None, slurm_bin))
        script.chmod(0o755)
        proc = subprocess.run([str(script)], env={"SLURM_JOB_ID": "7", "SLURM_JOB_USER": "bob"},
                              timeout=30)
        assert proc.returncode == 0
        # Only the site's scontrol prints the job's #ARNOLD script: then on to arnold-prolog,
        # with that Slurm first on its PATH.
        assert marker.exists() == reached
        if reached:
            assert marker.read_text().split(":")[0] == str(commands)


def test_arnold_lines_carry_cp_ep_and_the_nvlink_group() -> None:
    wanted = wanted_from_script("#!/bin/sh\n#ARNOLD --tp 4 --pp 2 --cp 2 --ep 4\n"
                                "#ARNOLD --nvlink-group tp-cp\n")
    assert wanted is not None
    assert (wanted.cp, wanted.ep, wanted.nvlink) == (2, 4, "tp-cp")
    plain = wanted_from_script(SCRIPT)
    assert plain is not None and (plain.cp, plain.ep, plain.nvlink) == (1, 1, "tp")
    with pytest.raises(ArnoldError, match="--cp 'two' is not a positive whole number"):
        wanted_from_script("#!/bin/sh\n#ARNOLD --tp 4 --pp 2 --cp two\n")


def test_a_spec_keeps_cp_ep_and_reads_old_specs_as_plain(tmp_path: Path) -> None:
    import json
    from dataclasses import asdict

    from site_config import load_config
    from slurm_arnold.submit.spec import BadSpec, JobSpec, read_spec, spec_path

    config = load_config({"state_dir": str(tmp_path / "state"),
                          "jobs_dir": str(tmp_path / "jobs")})
    user, uid = "me", os.getuid()
    spec = JobSpec(7, user, "0123abcd", 4, 2, 4, 8, 0.5, "mip", "tp-dp-pp", cp=2, ep=2,
                   nvlink="tp-cp")
    path = spec_path(config, user, 7)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(asdict(spec)))
    path.chmod(0o644)
    read = read_spec(config, user, uid, 7, nodes=8)  # 4 x 2 x 2 x 4 = 64 GPUs = 8 nodes
    assert read == spec and read is not None and read.shape.tp == 8  # TP x CP units
    old = {k: v for k, v in asdict(spec).items() if k not in ("cp", "ep", "nvlink")}
    path.write_text(json.dumps(old))
    read = read_spec(config, user, uid, 7, nodes=4)
    assert read is not None and (read.cp, read.ep, read.nvlink) == (1, 1, "tp")
    path.write_text(json.dumps(asdict(spec) | {"ep": 3}))
    with pytest.raises(BadSpec, match="EP=3 does not divide DP=4"):
        read_spec(config, user, uid, 7)
