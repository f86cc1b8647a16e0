"""What we believe sbatch will do with options, checked against what the live sbatch did.

Each case submits a held job with plain ``sbatch`` (command line, ``SBATCH_*`` environment,
script on file or stdin, or ``--wrap``), reads it back with ``scontrol show job``, and compares
with ``effective()``, the reading arnold-sbatch relies on.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from slurm_arnold.slurm import Slurm, parse_oneliner, parse_time_limit
from slurm_arnold.submit.options import effective, split_args

pytestmark = pytest.mark.live

# (case id, command-line args, SBATCH_* environment, script text or None for --wrap)
CASES = [
    ("cli-over-env-over-script", ["-J", "cli"], {"SBATCH_JOB_NAME": "env"},
     "#!/bin/bash\n#SBATCH -J script\ntrue\n"),
    ("env-over-script", [], {"SBATCH_JOB_NAME": "env"}, "#!/bin/bash\n#SBATCH -J script\ntrue\n"),
    ("script-alone", [], {}, "#!/bin/bash\n#SBATCH --job-name=script -t 7\ntrue\n"),
    ("time-env-over-script", [], {"SBATCH_TIMELIMIT": "9"},
     "#!/bin/bash\n#SBATCH -t 5\ntrue\n"),
    ("time-cli-over-env", ["--time=3"], {"SBATCH_TIMELIMIT": "9"},
     "#!/bin/bash\n#SBATCH -t 5\ntrue\n"),
    ("directives-stop-at-first-command", [], {},
     "#!/bin/bash\n#SBATCH -J first\necho hi\n#SBATCH -J ignored\n#SBATCH -N 2\n"),
    ("blank-lines-and-comments-do-not-stop", [], {},
     "#!/bin/bash\n\n# a comment\n#SBATCH -N 2\n\n#SBATCH -J late\ntrue\n"),
    ("quoting", [], {}, "#!/bin/bash\n#SBATCH -J 'two words'\ntrue\n"),
    ("hash-starts-a-comment", [], {}, "#!/bin/bash\n#SBATCH -J named # not this\ntrue\n"),
    ("no-expansion", [], {}, "#!/bin/bash\n#SBATCH -J $HOME\ntrue\n"),
    ("hetjob-first-component", [], {},
     "#!/bin/bash\n#SBATCH -N 2 -J het -t 4\n#SBATCH hetjob\n#SBATCH -N 1 -t 9\ntrue\n"),
    ("wrap-with-env", ["-N", "3", "--wrap", "true"], {"SBATCH_JOB_NAME": "wrapped"}, None),
    ("stdin-script", ["-t", "2:00"], {}, "#!/bin/bash\n#SBATCH -J piped -N 2\ntrue\n"),
]


def _show(job_id: int) -> dict[str, str]:
    out = subprocess.run(["scontrol", "-o", "show", "job", str(job_id)], capture_output=True,
                         text=True, check=True).stdout.splitlines()[0]
    return parse_oneliner(out)


@pytest.mark.parametrize(("case", "args", "env", "script"), CASES, ids=[c[0] for c in CASES])
def test_effective_options_match_the_live_sbatch(slurm: Slurm, tmp_path: Path, case: str,
                                                 args: list[str], env: dict[str, str],
                                                 script: str | None) -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SBATCH_")} | env
    argv = ["--hold", "-o", "/dev/null", *args]
    stdin = None
    if script is not None and case == "stdin-script":
        stdin = script
    elif script is not None:
        path = tmp_path / "job.sh"
        path.write_text(script)
        argv.append(str(path))
    proc = subprocess.run(["sbatch", "--parsable", *argv], input=stdin, capture_output=True,
                          text=True, env=environ)
    assert proc.returncode == 0, proc.stderr
    job_id = int(proc.stdout.strip().split(";")[0].split("+")[0])
    try:
        shown = _show(job_id)
    finally:
        slurm.cancel(job_id)
    believed = effective(split_args(argv), script, environ)
    # What we believe, where we believe something; sbatch's defaults otherwise.
    name = believed.get("job-name", "wrap" if script is None else
                        "sbatch" if case == "stdin-script" else "job.sh")
    assert shown["JobName"] == name
    nodes = believed.get("nodes", "1")
    assert shown["NumNodes"].split("-")[0] == nodes
    if "time" in believed:
        limit = parse_time_limit(believed["time"])
        assert limit is not None
        h, m, sec = (int(x) for x in shown["TimeLimit"].split("-")[-1].split(":"))
        assert h * 3600 + m * 60 + sec == limit
