"""Submission: ``sbatch --parsable`` (the job id) and ``sbatch --test-only`` (the nodes
slurmctld would give a job now), which answers only in one line of text."""

from __future__ import annotations

import re
from collections.abc import Sequence

import hostlist

from slurm_arnold.errors import SlurmOutputError
from slurm_arnold.slurm.runner import Runner

# 26.05 prints a stray word after the time ("... to start at <time> a using ..."): one token
# there is allowed, nothing else.
TEST_ONLY = re.compile(
    r"^sbatch: Job \d+ to start at \S+(?: \S+)? using \d+ processors on nodes (\S+) "
    r"in partition \S+$"
)


def parse_test_only(text: str) -> list[str]:
    """Nodes from sbatch's ``--test-only`` line
    (``sbatch: Job 8 to start at <time> using 256 processors on nodes n[001-016] in partition
    gpu``); raises ``SlurmOutputError`` on anything else."""
    for line in text.splitlines():
        match = TEST_ONLY.match(line.strip())
        if match:
            return list(hostlist.expand_hostlist(match.group(1)))
    raise SlurmOutputError(f"sbatch --test-only: no placement line in {text.strip()!r}")


def submit(runner: Runner, args: Sequence[str], script: str | None = None) -> int:
    """Submit with ``sbatch --parsable``; return the job id.

    ``args`` are sbatch's options (and a script path); ``script`` is sent on stdin.
    """
    proc = runner.run(["sbatch", "--parsable", *args], input=script)
    first = proc.stdout.strip().split(";", 1)[0]
    if not first.isdigit():
        raise SlurmOutputError(f"sbatch --parsable printed {proc.stdout.strip()!r}")
    return int(first)


def test_only(runner: Runner, args: Sequence[str]) -> list[str]:
    """The nodes slurmctld would give a job now (``sbatch --test-only``), in its order."""
    proc = runner.run(["sbatch", "--test-only", *args, "--wrap", "true"])
    return parse_test_only(proc.stderr + proc.stdout)
