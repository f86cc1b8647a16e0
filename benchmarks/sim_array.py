"""``arnold bench sim --slurm``: the replays of a sweep as one Slurm job array.

A sweep over logs x policies x settings outgrows one machine; each replay is independent and
single-threaded, so each becomes one task of an array on the cluster the command runs on. The
command writes the runs to ``specs.json`` in a directory the nodes can read (the current
directory by default: on a cluster it is on the shared file system), submits
``python -m benchmarks.sim_array DIR`` as ``--array=0-(N-1)``, waits, and reads each task's
``result-<i>.json`` back into the same tables as an in-process run. A task that ends without
its result is named with its output file.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.sim import RunSpec, run_spec
from slurm_arnold.errors import ArnoldError
from slurm_arnold.slurm import Slurm


def run_array(specs: Sequence[RunSpec], slurm: Slurm, workdir: Path, *,
              poll_s: float = 2.0, timeout_s: float = 24 * 3600.0,
              progress: Callable[[str], None] | None = None,
              sbatch_args: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Run ``specs`` as one job array from ``workdir``; their results, in order."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "specs.json").write_text(json.dumps([asdict(s) for s in specs]))
    command = f"{sys.executable} -m benchmarks.sim_array {workdir.resolve()}"
    job_id = slurm.submit(["--array", f"0-{len(specs) - 1}", "--job-name", "arnold-bench-sim",
                           "--ntasks", "1", "--cpus-per-task", "1",
                           "--output", str(workdir.resolve() / "task-%a.out"),
                           *sbatch_args, "--wrap", command])
    if progress:
        progress(f"job array {job_id}: {len(specs)} replays")
    deadline = time.monotonic() + timeout_s
    results: dict[int, dict[str, Any]] = {}
    while len(results) < len(specs):
        for i in range(len(specs)):
            path = workdir / f"result-{i}.json"
            if i not in results and path.exists():
                results[i] = json.loads(path.read_text())
                if progress:
                    progress(f"task {i} done: {specs[i].log} {specs[i].policy} "
                             f"{specs[i].predictor} {specs[i].tag or specs[i].mode}")
        if len(results) == len(specs):
            break
        if not slurm.unfinished_tasks(job_id):
            time.sleep(poll_s)  # a result written as the task ended
            missing = [i for i in range(len(specs))
                       if i not in results and not (workdir / f"result-{i}.json").exists()]
            if missing:
                raise ArnoldError(f"job array {job_id}: task {missing[0]} ended without a "
                                  f"result; see {workdir / f'task-{missing[0]}.out'}")
            continue
        if time.monotonic() > deadline:
            raise ArnoldError(f"job array {job_id} still runs after {timeout_s:.0f} s; "
                              f"scancel {job_id} and rerun with more nodes or fewer logs")
        time.sleep(poll_s)
    return [results[i] for i in range(len(specs))]


def main(argv: Sequence[str]) -> int:
    """An array task: replay spec ``$SLURM_ARRAY_TASK_ID`` of ``DIR/specs.json``."""
    workdir = Path(argv[0])
    index = int(os.environ["SLURM_ARRAY_TASK_ID"])
    spec = RunSpec(**json.loads((workdir / "specs.json").read_text())[index])
    try:
        result = run_spec(spec)
    except ArnoldError as exc:  # bad input: one line in the task's output, as everywhere
        print(f"arnold: bench sim task {index}: error: {exc}", file=sys.stderr)
        return 1
    partial = workdir / f".result-{index}.json"
    partial.write_text(json.dumps(result))
    partial.replace(workdir / f"result-{index}.json")  # the gatherer never reads half a file
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
