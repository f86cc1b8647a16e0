"""Splitting arnold-sbatch's arguments and reading #SBATCH / #ARNOLD lines."""

from __future__ import annotations

import pytest

from slurm_arnold.errors import ArnoldError
from slurm_arnold.submit.options import arnold_options, directive_lines, effective, split_args


def test_ours_are_taken_out_and_the_rest_kept_in_order() -> None:
    p = split_args(["--tp", "8", "-N4", "--pp=4", "--export", "ALL", "-p", "gpu", "--wait",
                    "--nodel", "n[1-4]", "job.sh", "--tp", "9"])
    assert p.ours == {"tp": "8", "pp": "4"}
    assert p.sbatch_args == ["-N4", "--export", "ALL", "-p", "gpu", "--wait", "--nodel",
                             "n[1-4]"]
    assert p.script == "job.sh" and p.script_args == ["--tp", "9"]  # the script's own args
    assert p.cli["nodes"] == "4" and p.cli["nodelist"] == "n[1-4]"
    assert p.cli["export"] == "ALL" and p.cli["wait"] == "1"


def test_optional_values_only_with_equals() -> None:
    p = split_args(["--exclusive", "job.sh"])
    assert p.script == "job.sh" and p.cli["exclusive"] == "1"
    p = split_args(["--nice=5", "--exclusive=user", "-vvN", "2", "x.sh"])
    assert p.cli["nice"] == "5" and p.cli["nodes"] == "2" and p.script == "x.sh"


def test_wrap_has_no_script() -> None:
    p = split_args(["--tp", "8", "--pp", "2", "-N", "2", "--wrap", "srun hostname"])
    assert p.script is None and p.cli["wrap"] == "srun hostname"


def test_ambiguous_abbreviation_is_an_error() -> None:
    with pytest.raises(ArnoldError, match="--nod is ambiguous"):
        split_args(["--nod", "2", "job.sh"])


SCRIPT = """#!/bin/bash
# a comment
#SBATCH -N 16 --ntasks-per-node=8   # trailing comment
#SBATCH --job-name "two words"
#ARNOLD --tp 8 --pp 4 --align auto
#SBATCH -p debug

srun hostname
#SBATCH -t 99
#ARNOLD --tp 2
"""


def test_directives_stop_at_the_first_command() -> None:
    assert directive_lines(SCRIPT, "#SBATCH") == [
        ["-N", "16", "--ntasks-per-node=8"], ["--job-name", "two words"], ["-p", "debug"]]
    assert directive_lines(SCRIPT, "#ARNOLD") == [["--tp", "8", "--pp", "4", "--align", "auto"]]


def test_precedence_command_line_env_script() -> None:
    p = split_args(["-N", "8", "job.sh"])
    eff = effective(p, SCRIPT, {"SBATCH_PARTITION": "env-part"})
    assert eff["nodes"] == "8"  # command line beats #SBATCH
    assert eff["partition"] == "env-part"  # environment beats #SBATCH
    assert eff["job-name"] == "two words" and "time" not in eff
    assert arnold_options(split_args(["--pp", "2", "job.sh"]), SCRIPT) == {
        "tp": "8", "pp": "2", "align": "auto"}


def test_unknown_arnold_directive() -> None:
    with pytest.raises(ArnoldError, match="#ARNOLD line: unknown option -N"):
        arnold_options(split_args(["job.sh"]), "#!/bin/sh\n#ARNOLD --tp 8 -N 4\n")


def test_heterogeneous_components() -> None:
    parsed = split_args(["-N", "2", "-J", "a", ":", "-N", "1", "-t", "9", "job.sh", "x"])
    assert parsed.components == 2
    assert parsed.cli == {"nodes": "2", "job-name": "a"}  # the first component's
    assert parsed.sbatch_args == ["-N", "2", "-J", "a", ":", "-N", "1", "-t", "9"]
    assert parsed.script == "job.sh" and parsed.script_args == ["x"]
    script = "#!/bin/bash\n#SBATCH -N 2 -t 4\n#SBATCH hetjob\n#SBATCH -N 1 -t 9\ntrue\n"
    assert effective(split_args([]), script, {}) == {"nodes": "2", "time": "4"}


def test_every_sbatch_input_variable_is_read() -> None:
    env = {"SBATCH_TIMELIMIT": "9", "SBATCH_JOB_NAME": "e", "SBATCH_ACCOUNT": "acc",
           "SBATCH_MEM_PER_NODE": "4G", "SBATCH_REQ_SWITCH": "1"}
    got = effective(split_args(["-J", "cli"]), "#!/bin/sh\n#SBATCH -t 5 -A x\ntrue\n", env)
    assert got == {"time": "9", "job-name": "cli", "account": "acc", "mem": "4G",
                   "switches": "1"}
