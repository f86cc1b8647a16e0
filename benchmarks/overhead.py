"""``arnold bench sbatch``: what arnold-sbatch adds to a submission, side by side with sbatch.

Alternating runs of the same 16-node job (TP8 x PP4 x DP4 on 8-GPU nodes), held and cancelled
at once so the cluster stays empty: plain ``sbatch`` (slurmctld picks nodes) against
``arnold-sbatch`` (reads the cluster, solves the placement, writes the rank files, runs the
same sbatch with ``--nodelist``). Wall time of each command as a user sees it.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.placement import repo_relative
from slurm_arnold.errors import ArnoldError
from slurm_arnold.slurm import Slurm

JOB = ["--parsable", "--hold", "-N", "16", "--exclusive", "--gpus-per-node=8", "-t", "5",
       "-o", "/dev/null", "--wrap", "true"]
OURS = ["--tp", "8", "--pp", "4"]


def _timed(cmd: list[str]) -> tuple[float, int]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise ArnoldError(f"{cmd[0]} failed: {proc.stderr.strip()}")
    return seconds, int(proc.stdout.strip().split(";")[0])


def _installed(name: str) -> str:
    """The site install's command (what users run: ``make cluster`` makes it, with compiled
    bytecode), else this Python's."""
    from benchmarks.multiuser import site_venv

    try:
        site = site_venv() / "bin" / name
    except ArnoldError:
        site = Path("/nonexistent")
    return str(site if site.exists() else Path(sys.executable).parent / name)


def run(runs: int = 9, progress: Callable[[str], None] | None = None,
        against: Path | None = None) -> dict[str, Any]:
    """``runs`` pairs of submissions; medians, their difference and ratio. ``against``: another
    install of slurm-arnold (a venv, e.g. of an earlier commit) whose arnold-sbatch joins each
    round, so both are measured side by side in one run."""
    slurm = Slurm()
    arnold = _installed("arnold-sbatch")
    commands = {"sbatch": ["sbatch", *JOB], "arnold-sbatch": [arnold, *OURS, *JOB]}
    if against is not None:
        other = against / "bin" / "arnold-sbatch"
        if not other.exists():
            raise ArnoldError(f"--against {against}: no bin/arnold-sbatch there; give a venv "
                              "with slurm-arnold installed")
        commands["against"] = [str(other), *OURS, *JOB]
    times: dict[str, list[float]] = {name: [] for name in commands}
    for i in range(runs):
        for name, cmd in commands.items():
            seconds, job_id = _timed(cmd)
            slurm.cancel(job_id)
            times[name].append(seconds)
        if progress:
            progress(f"round {i + 1}/{runs}: " + ", ".join(
                f"{name} {values[-1]:.3f} s" for name, values in times.items()))
    med_plain = statistics.median(times["sbatch"])
    med_ours = statistics.median(times["arnold-sbatch"])
    compared = {}
    if against is not None:
        med_other = statistics.median(times["against"])
        compared = {"against": {"install": str(against),
                                "arnold_sbatch_median_s": round(med_other, 3),
                                "overhead_median_s": round(med_other - med_plain, 3),
                                "ratio": round(med_ours / med_other, 3)}}
    return {**compared, "runs": runs, "install": str(Path(arnold).parent.parent),
            "jobs_known": len(slurm.jobs()), "sbatch_median_s": round(med_plain, 3),
            "arnold_sbatch_median_s": round(med_ours, 3),
            "overhead_median_s": round(med_ours - med_plain, 3),
            "ratio": round(med_ours / med_plain, 2) if med_plain else None,
            "target_met": med_ours - med_plain <= 1.0}


def markdown(result: dict[str, Any], command: str) -> str:
    """The docs section."""
    return "\n".join([
        "## arnold-sbatch overhead", "",
        f"Command: `{command}` (on the 64-node local cluster; setup in "
        "`benchmarks/overhead.py`: a held 16-node TP8 x PP4 x DP4 job, alternating; "
        f"arnold-sbatch from {repo_relative(result.get('install', 'this venv'))}; "
        f"{result.get('jobs_known', '?')} jobs known to slurmctld; arnold-sbatch lists only the "
        "unfinished ones, as text, since `squeue --json` ignores filters and lists every "
        "finished job too).", "",
        f"- median of {result['runs']} submissions: sbatch **{result['sbatch_median_s']} s**, "
        f"arnold-sbatch **{result['arnold_sbatch_median_s']} s**: overhead "
        f"**{result['overhead_median_s']} s** (x{result['ratio']}); target <= 1 s: "
        f"{'met' if result['target_met'] else 'NOT met'}.",
        *_against_lines(result),
        *_multi_user_lines(result.get("multi_user")),
    ])


def _against_lines(result: dict[str, Any]) -> list[str]:
    other = result.get("against")
    if other is None:
        return []
    return ["- side by side in the same run, arnold-sbatch of "
            f"`{Path(other['install']).name}` (--against): median "
            f"**{other['arnold_sbatch_median_s']} s** (overhead {other['overhead_median_s']} s); "
            f"this install's over it: x{other['ratio']}."]


def _multi_user_lines(m: dict[str, Any] | None) -> list[str]:
    if m is None:
        return []
    return [
        f"- many users at once (`benchmarks/multiuser.py`): {m.get('rounds', 1)} bursts of "
        f"{m['users']} Unix users x {m['per_user']} concurrent held {m['nodes_per_job']}-node "
        "TP8 x PP2 submissions through the site install (run with `setpriv`, only HOME, PATH "
        "and SLURM_CONF set): latency over all, p50 "
        f"**{m['p50_s']} s**, p95 **{m['p95_s']} s**, max {m['max_s']} s; worst burst's p95 "
        f"**{m.get('worst_burst_p95_s', m['p95_s'])} s**; "
        f"{m['submitted']} submitted, {m['failed']} failed, "
        f"{len(m['shared_node_pairs'])} pairs of jobs sharing a node; target p95 <= 5 s on "
        "this 2-core machine, judged on the worst burst: "
        f"{'met' if m['target_met'] else 'NOT met'}.",
    ]
