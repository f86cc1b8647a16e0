"""``arnold bench sync``: the admin loop's pass (``arnold reserve sync``) with a deep queue,
each Slurm backend side by side in one run.

The cluster is made full (two running jobs hold every node), two large jobs wait behind them
and ``queue`` one-node jobs wait behind those, pending on Slurm's own reasons (Resources,
Priority), as a busy site's queue does. Each round, for each backend in turn: the large jobs
are submitted afresh, a first pass runs on a fresh state directory (it reserves for them and
judges every waiting job), then ``passes`` more passes run (they find nothing to change).
Large jobs are those of 64 GPUs or more and time limits serve as run-time predictions (the
model's gate is the same code with other numbers), as in ``tests/test_reserve_live.py``.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from benchmarks.backends import available, backend_env, installed
from benchmarks.multiuser import percentile
from slurm_arnold.errors import ArnoldError
from slurm_arnold.slurm import Slurm

#: Names of this bench's jobs (cleaned up before and after by these names).
QUEUE_NAME, LARGE_NAME, HOLDER_NAME = "arnold-bench-queue", "arnold-bench-lpj", "arnold-bench-hold"
_COMMON = ["--parsable", "-o", "/dev/null", "--exclusive", "--gpus-per-node=8"]


def _sbatch(args: Sequence[str]) -> int:
    proc = subprocess.run(["sbatch", *_COMMON, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ArnoldError(f"sbatch {' '.join(args)}: {proc.stderr.strip()}")
    return int(proc.stdout.strip().split(";")[0])


def _cancel_named(slurm: Slurm, names: Sequence[str]) -> None:
    for name in names:
        subprocess.run(["scancel", "--name", name], check=False, capture_output=True)
    deadline = time.monotonic() + 120
    while any(j.name in names and j.state in ("RUNNING", "PENDING", "COMPLETING")
              for j in slurm.jobs(unfinished=True)):
        if time.monotonic() > deadline:
            raise ArnoldError(f"jobs {', '.join(names)} did not leave the queue in 120 s")
        time.sleep(0.5)


def _delete_ours(slurm: Slurm) -> None:
    for res in slurm.reservations():
        if res.name.startswith("arnold_"):
            slurm.delete_reservation(res.name)


def fill(slurm: Slurm, queue: int, progress: Callable[[str], None]) -> dict[str, Any]:
    """Make the default partition full and ``queue`` one-node jobs wait: two holders on every
    node (their time limits end in an hour and two), then the one-node jobs (4 submitting at
    once). The node count and how long filling took."""
    partition = slurm.default_partition()
    nodes = len([n for n in slurm.nodes() if n.state in ("IDLE", "MIXED", "ALLOCATED")
                 and (partition is None or partition in n.partitions)])
    if nodes < 8:
        raise ArnoldError(f"{nodes} nodes up; the sync bench needs at least 8")
    first = nodes * 3 // 4
    t0 = time.perf_counter()
    holders = [_sbatch(["-J", HOLDER_NAME, "-N", str(count), "-t", str(minutes), "--wrap",
                        "sleep 7200"]) for count, minutes in ((first, 60), (nodes - first, 120))]
    deadline = time.monotonic() + 60
    while any(j.state != "RUNNING" for j in slurm.jobs(unfinished=True) if j.job_id in holders):
        if time.monotonic() > deadline:
            raise ArnoldError(f"the two jobs that fill the {nodes} nodes did not start in 60 s; "
                              "the sync bench needs an idle cluster")
        time.sleep(0.5)
    with ThreadPoolExecutor(4) as pool:
        for done, _ in enumerate(pool.map(lambda _: _sbatch(
                ["-J", QUEUE_NAME, "-N", "1", "-t", "30", "--wrap", "true"]), range(queue))):
            if (done + 1) % 500 == 0:
                progress(f"{done + 1}/{queue} jobs queued")
    return {"nodes": nodes, "fill_s": round(time.perf_counter() - t0, 1)}


def _pass(arnold: str, env: dict[str, str]) -> tuple[float, int]:
    t0 = time.perf_counter()
    proc = subprocess.run([arnold, "reserve", "sync"], capture_output=True, text=True, env=env,
                          cwd="/")
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise ArnoldError(f"arnold reserve sync failed: {proc.stderr.strip()}")
    return seconds, len([line for line in proc.stdout.splitlines() if line.strip()])


def run(queue: int = 2000, rounds: int = 3, passes: int = 3,
        backends: Sequence[str] | None = None,
        progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """The bench (see the module); medians per backend and the ratios to the commands'."""
    slurm = Slurm(backend="commands")
    chosen = available(backends)
    arnold = installed("arnold")
    names = (QUEUE_NAME, LARGE_NAME, HOLDER_NAME)
    _cancel_named(slurm, names)
    _delete_ours(slurm)
    base = {k: v for k, v in os.environ.items() if not k.startswith("ARNOLD_")} | {
        "ARNOLD_RESERVATION__LARGE_JOB_GPUS": "64",
        "ARNOLD_RESERVATION__PREDICTOR": "requested",
        "ARNOLD_RESERVATION__PAY_FOR_ITSELF": "false"}
    major, minor = slurm.version()
    result: dict[str, Any] = {"queue": queue, "rounds": rounds, "passes": passes,
                              "install": installed("arnold"), "slurm": f"{major}.{minor:02d}"}
    first: dict[str, list[float]] = {b: [] for b in chosen}
    later: dict[str, list[float]] = {b: [] for b in chosen}
    reads: dict[str, list[float]] = {b: [] for b in chosen}
    actions: dict[str, list[int]] = {b: [] for b in chosen}
    try:
        result |= fill(slurm, queue, progress)
        large = max(2, result["nodes"] // 4)
        for r in range(rounds):
            for backend in chosen:
                _cancel_named(slurm, (LARGE_NAME,))
                _delete_ours(slurm)
                for _ in range(2):
                    _sbatch(["-J", LARGE_NAME, "-N", str(large), "-t", "60", "--wrap", "true"])
                state = tempfile.mkdtemp(prefix="arnold-bench-sync-")
                os.chmod(state, 0o755)
                env = backend_env(backend, base | {"ARNOLD_STATE_DIR": state})
                try:
                    seconds, made = _pass(arnold, env)
                    first[backend].append(seconds)
                    actions[backend].append(made)
                    for _ in range(passes):
                        later[backend].append(_pass(arnold, env)[0])
                finally:
                    shutil.rmtree(state, ignore_errors=True)
                t0 = time.perf_counter()
                Slurm(backend=backend).jobs()
                reads[backend].append(time.perf_counter() - t0)
                progress(f"round {r + 1}/{rounds} {backend}: first pass {first[backend][-1]:.2f}"
                         f" s ({actions[backend][-1]} actions), next "
                         f"{statistics.median(later[backend][-passes:]):.2f} s")
        result["queued_seen"] = sum(1 for j in slurm.jobs(unfinished=True)
                                    if j.name == QUEUE_NAME)
    finally:
        _cancel_named(slurm, names)
        _delete_ours(slurm)
    result["backends"] = {b: {
        "first_pass_median_s": round(statistics.median(first[b]), 3),
        "first_pass_max_s": round(max(first[b]), 3),
        "next_pass_median_s": round(statistics.median(later[b]), 3),
        "next_pass_p95_s": round(percentile(later[b], 0.95), 3),
        "jobs_read_median_s": round(statistics.median(reads[b]), 3),
        "first_pass_actions": max(actions[b]),
    } for b in chosen}
    by = result["backends"]
    if "pyslurm" in by and "commands" in by:
        result["ratio_first"] = round(by["pyslurm"]["first_pass_median_s"]
                                      / by["commands"]["first_pass_median_s"], 3)
        result["ratio_next"] = round(by["pyslurm"]["next_pass_median_s"]
                                     / by["commands"]["next_pass_median_s"], 3)
        result["target_met"] = result["ratio_first"] <= 0.5 and result["ratio_next"] <= 0.5
    return result


def markdown(result: dict[str, Any], command: str) -> str:
    """The docs section."""
    lines = [
        "## One admin pass with a deep queue, by Slurm backend", "",
        f"Command: `{command}` (Slurm {result.get('slurm', '?')}; setup in "
        f"`benchmarks/sync.py`: {result['nodes']} nodes held by "
        f"two running jobs, two large jobs and {result['queue']} one-node jobs waiting; "
        f"each round and backend: the large jobs afresh, a first `arnold reserve sync` on a "
        f"fresh state directory, then {result['passes']} more; medians of {result['rounds']} "
        "rounds; an action is a line the pass prints: a reservation made, a job admitted or "
        "refused).", "",
        "| backend | first pass | its actions | next passes (median / p95) | one read of "
        "every job |",
        "|---|---|---|---|---|",
    ]
    for name, b in result["backends"].items():
        lines.append(f"| {name} | {b['first_pass_median_s']} s | {b['first_pass_actions']} | "
                     f"{b['next_pass_median_s']} s / {b['next_pass_p95_s']} s | "
                     f"{b['jobs_read_median_s']} s |")
    if "ratio_first" in result:
        lines += ["", f"pyslurm over the commands: first pass x{result['ratio_first']}, next "
                  f"passes x{result['ratio_next']}; target <= x0.5 both: "
                  f"{'met' if result['target_met'] else 'NOT met'}."]
    return "\n".join(lines)
