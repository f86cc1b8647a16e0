"""``arnold bench sbatch``: what arnold-sbatch adds to a submission, side by side with sbatch.

Alternating runs of the same 16-node job (TP8 x PP4 x DP4 on 8-GPU nodes), held and cancelled
at once so the cluster stays empty: plain ``sbatch`` (slurmctld picks nodes) against
``arnold-sbatch`` (reads the cluster, solves the placement, writes the rank files, runs the
same sbatch with ``--nodelist``), once per Slurm backend. Wall time of each command as a user
sees it, and arnold-sbatch's time inside the site lock (what every other submission waits
behind), from its own debug line.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.backends import backend_env, installed
from benchmarks.multiuser import percentile
from benchmarks.placement import repo_relative
from slurm_arnold.errors import ArnoldError
from slurm_arnold.slurm import Slurm

JOB = ["--parsable", "--hold", "-N", "16", "--exclusive", "--gpus-per-node=8", "-t", "5",
       "-o", "/dev/null", "--wrap", "true"]
OURS = ["--tp", "8", "--pp", "4"]


#: arnold-sbatch's debug line when it lets the site lock go (``submit/flow.py``).
_LOCK_HELD = re.compile(r"released the site lock after holding it ([0-9.]+) s")


def _timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, int, float | None]:
    """Wall time, job id, and seconds inside the site lock (arnold-sbatch only)."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise ArnoldError(f"{cmd[0]} failed: {proc.stderr.strip()}")
    held = _LOCK_HELD.search(proc.stderr)
    return seconds, int(proc.stdout.strip().split(";")[0]), float(held[1]) if held else None


def run(runs: int = 9, progress: Callable[[str], None] | None = None,
        against: Path | None = None, backends: Sequence[str] = ("commands",)) -> dict[str, Any]:
    """``runs`` rounds of submissions (sbatch, then arnold-sbatch once per backend): medians,
    overheads and ratios; the first backend's are the top-level figures. ``against``: another
    install of slurm-arnold (a venv, e.g. of an earlier commit) whose arnold-sbatch joins each
    round, so both are measured side by side in one run."""
    slurm = Slurm()
    arnold = installed("arnold-sbatch")
    commands: dict[str, tuple[list[str], dict[str, str] | None]] = {
        "sbatch": (["sbatch", *JOB], None)}
    for backend in backends:
        commands[backend] = ([arnold, *OURS, *JOB],
                             backend_env(backend) | {"ARNOLD_DEBUG": "1"})
    if against is not None:
        other = against / "bin" / "arnold-sbatch"
        if not other.exists():
            raise ArnoldError(f"--against {against}: no bin/arnold-sbatch there; give a venv "
                              "with slurm-arnold installed")
        commands["against"] = ([str(other), *OURS, *JOB], None)
    times: dict[str, list[float]] = {name: [] for name in commands}
    held: dict[str, list[float]] = {name: [] for name in commands}
    for i in range(runs):
        for name, (cmd, env) in commands.items():
            seconds, job_id, lock = _timed(cmd, env)
            slurm.cancel(job_id)
            times[name].append(seconds)
            if lock is not None:
                held[name].append(lock)
        if progress:
            progress(f"round {i + 1}/{runs}: " + ", ".join(
                f"{name} {values[-1]:.3f} s" for name, values in times.items()))
    med_plain = statistics.median(times["sbatch"])
    by_backend = {}
    for backend in backends:
        if not held[backend]:
            raise ArnoldError(f"arnold-sbatch ({backend}) printed no site-lock time; is "
                              f"{arnold} older than this checkout?")
        med = statistics.median(times[backend])
        by_backend[backend] = {
            "arnold_sbatch_median_s": round(med, 3), "overhead_median_s": round(med - med_plain, 3),
            "lock_median_s": round(statistics.median(held[backend]), 3),
            "lock_p95_s": round(percentile(held[backend], 0.95), 3)}
    lead = by_backend[backends[0]]
    med_ours = lead["arnold_sbatch_median_s"]
    compared = {}
    if against is not None:
        med_other = statistics.median(times["against"])
        compared = {"against": {"install": str(against),
                                "arnold_sbatch_median_s": round(med_other, 3),
                                "overhead_median_s": round(med_other - med_plain, 3),
                                "ratio": round(med_ours / med_other, 3)}}
    ratios = {}
    if "pyslurm" in by_backend and "commands" in by_backend:
        ratios = {"lock_ratio": round(by_backend["pyslurm"]["lock_median_s"]
                                      / by_backend["commands"]["lock_median_s"], 3)}
    return {**compared, **ratios, "runs": runs, "install": str(Path(arnold).parent.parent),
            "jobs_known": len(slurm.jobs()), "sbatch_median_s": round(med_plain, 3),
            "slurm": ".".join(f"{x:02d}" if i else str(x) for i, x in enumerate(slurm.version())),
            "backend": backends[0], "backends": by_backend,
            "arnold_sbatch_median_s": med_ours, "overhead_median_s": lead["overhead_median_s"],
            "lock_median_s": lead["lock_median_s"],
            "ratio": round(med_ours / med_plain, 2) if med_plain else None,
            "target_met": lead["overhead_median_s"] <= 1.0}


def markdown(result: dict[str, Any], command: str) -> str:
    """The docs section."""
    return "\n".join([
        "## arnold-sbatch overhead", "",
        f"Command: `{command}` (on the 64-node local cluster, Slurm "
        f"{result.get('slurm', '?')}; setup in "
        "`benchmarks/overhead.py`: a held 16-node TP8 x PP4 x DP4 job, alternating; "
        f"arnold-sbatch from {repo_relative(result.get('install', 'this venv'))}; "
        f"{result.get('jobs_known', '?')} jobs known to slurmctld; through the commands "
        "arnold-sbatch lists only the unfinished ones, as text, since `squeue --json` ignores "
        "filters and lists every finished job too; pyslurm loads every job slurmctld knows).",
        "",
        f"- median of {result['runs']} submissions: sbatch **{result['sbatch_median_s']} s**, "
        f"arnold-sbatch ({result.get('backend', 'commands')} backend) "
        f"**{result['arnold_sbatch_median_s']} s**: overhead "
        f"**{result['overhead_median_s']} s** (x{result['ratio']}); target <= 1 s: "
        f"{'met' if result['target_met'] else 'NOT met'}.",
        *_against_lines(result),
        *_multi_user_lines(result.get("multi_user")),
        *_backend_lines(result),
    ])


def _backend_lines(result: dict[str, Any]) -> list[str]:
    """Each Slurm backend's row, measured in the same rounds."""
    rows = result.get("backends") or {}
    if not rows:
        return []
    lines = ["", "| Slurm backend | arnold-sbatch (median) | overhead | inside the site lock "
             "(median / p95) | users at once: p95 (worst burst) |", "|---|---|---|---|---|"]
    for name, b in rows.items():
        m = b.get("multi_user")
        burst = f"{m['p95_s']} s ({m['worst_burst_p95_s']} s)" if m else "-"
        lines.append(f"| {name} | {b['arnold_sbatch_median_s']} s | {b['overhead_median_s']} s "
                     f"| {b['lock_median_s']} s / {b['lock_p95_s']} s | {burst} |")
    if "lock_ratio" in result:
        lines += ["", f"Inside the site lock, pyslurm over the commands: "
                  f"x{result['lock_ratio']}; target <= x0.5: "
                  f"{'met' if result['lock_ratio'] <= 0.5 else 'NOT met'}."]
    return lines


def _against_lines(result: dict[str, Any]) -> list[str]:
    other = result.get("against")
    if other is None:
        return []
    lines = ["- side by side in the same run, arnold-sbatch of "
             f"`{Path(other['install']).name}` (--against): median "
             f"**{other['arnold_sbatch_median_s']} s** (overhead {other['overhead_median_s']} s);"
             f" this install's over it: x{other['ratio']}."]
    m, ours = other.get("multi_user"), result.get("multi_user")
    if m and ours:
        lines.append(f"- the same bursts through `{Path(other['install']).name}`: p50 "
                     f"{m['p50_s']} s, p95 {m['p95_s']} s, worst burst {m['worst_burst_p95_s']}"
                     f" s; this install's p95 over it: x{ours['p95_s'] / m['p95_s']:.3f}.")
    return lines


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
