"""``arnold bench mapping``: ranks at job start (``arnold-prolog``) against Slurm's own order.

1. **Random allocations of fragmented clusters.** For each case a seeded synthetic fat tree
   (``benchmarks.clusters``, the 1k- and 12k-GPU scales alternately) is fragmented by replaying
   a job mix to 60-80 % busy; a job shape and size are drawn, and the allocation is a random
   subset of the free nodes (what a topology-blind scheduler hands out). Our mapping
   (``slurm_arnold.placement.mapping``) and Slurm's default task order (block distribution in
   Slurm's node order) are measured on the same nodes: DP and PP spreads and the weighted
   spread at alpha 0.5.
2. **The prolog's mapping at 1,024 nodes** (offline): a TP 8 x PP 8 x DP 128 job on 1,024
   random free nodes of a lightly used 12k-GPU cluster (1,536 nodes); wall time of the mapping.
3. **Live** (``--live``, on the local cluster): wall time of slurmctld's ``PrologSlurmctld``
   (the site install's ``arnold-prolog`` wrapper, run with the environment slurmctld gives
   it) for a job it maps and for a job that asks for nothing, which every job pays.
"""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.clusters import SCALES, build_tree, fragment
from benchmarks.placement import repo_relative
from slurm_arnold.errors import ArnoldError
from slurm_arnold.placement import JobShape
from slurm_arnold.placement.mapping import map_allocation

SHAPES = [(8, 2), (8, 4), (8, 8), (4, 4), (16, 2)]


def allocation_case(seed: int) -> dict[str, Any]:
    """One random allocation of a fragmented cluster, mapped both ways."""
    rng = random.Random(seed)
    scale = SCALES["1k" if seed % 2 == 0 else "12k"]
    topo = build_tree(scale, rng)
    free = fragment(topo, rng.uniform(0.6, 0.8), rng)
    tp, pp = rng.choice(SHAPES)
    unit = max(1, tp // 8) * pp  # nodes per pipeline replica
    nodes = unit * rng.randint(2, max(2, min(64, len(free) // 2) // unit))
    job = JobShape.from_nodes(nodes, tp, pp, 8)
    allocation = rng.sample(free, job.nodes)
    t0 = time.perf_counter()
    result = map_allocation(topo, allocation, job, alpha=0.5)
    seconds = time.perf_counter() - t0
    ours, theirs = result.chosen.metrics, result.default.metrics
    return {"seed": seed, "scale": scale.name, "tp": tp, "pp": pp, "dp": job.dp,
            "nodes": job.nodes, "ours_dp": ours.max_dp_spread, "ours_pp": ours.max_pp_spread,
            "slurm_dp": theirs.max_dp_spread, "slurm_pp": theirs.max_pp_spread,
            "ours_weighted": ours.weighted_spread, "slurm_weighted": theirs.weighted_spread,
            "seconds": round(seconds, 4), "note": result.note}


def time_at(nodes: int = 1024, seeds: int = 3) -> dict[str, Any]:
    """Wall time of the mapping of a TP 8 x PP 8 job onto ``nodes`` random free nodes of a
    12k-GPU cluster, over ``seeds`` clusters."""
    times = []
    for seed in range(seeds):
        rng = random.Random(1000 + seed)
        topo = build_tree(SCALES["12k"], rng)
        free = fragment(topo, 0.2, rng)
        job = JobShape.from_nodes(nodes, 8, 8, 8)
        allocation = rng.sample(free, job.nodes)
        t0 = time.perf_counter()
        map_allocation(topo, allocation, job, alpha=0.5)
        times.append(time.perf_counter() - t0)
    return {"nodes": nodes, "cluster_nodes": len(topo.nodes), "runs": seeds,
            "median_s": round(statistics.median(times), 3), "max_s": round(max(times), 3)}


def live_prolog(runs: int = 5, against: Path | None = None) -> dict[str, Any]:
    """Wall time of the local cluster's PrologSlurmctld for a held ``#ARNOLD`` job (its rank
    file removed before each run, so each run maps) and for a held plain job; and of
    ``arnold-prolog`` itself for the plain job (what the shell wrapper spares most jobs: the
    Python program's start-up), beside ``against``'s (another install, e.g. of an earlier
    commit) in the same run."""
    from site_config import load_config
    from slurm_arnold.prolog import admin_rankfile
    from slurm_arnold.slurm import Slurm

    config = load_config()
    slurm = Slurm()
    conf = Path(slurm.env["SLURM_CONF"]) if "SLURM_CONF" in slurm.env else None
    if conf is None:
        raise RuntimeError("SLURM_CONF is not set: source devcluster.env first")
    prolog = conf.parent / "arnold-prolog"
    idle = [n.name for n in slurm.nodes() if n.state == "IDLE" and not n.flags]
    picked = idle[::max(1, len(idle) // 8)][:8]
    arnold_job = slurm.submit(["--hold", "-N", "8", "-t", "1", "-o", "/dev/null"],
                              "#!/bin/bash\n#ARNOLD --tp 8 --pp 2\nsrun true\n")
    plain_job = slurm.submit(["--hold", "-N", "1", "-t", "1", "-o", "/dev/null"],
                             "#!/bin/bash\ntrue\n")
    out: dict[str, Any] = {"prolog": str(prolog), "nodes": len(picked)}
    try:
        for name, job_id, nodes in (("mapped", arnold_job, picked),
                                    ("nothing_asked", plain_job, picked[:1])):
            times = []
            for _ in range(runs):
                admin_rankfile(config, job_id).unlink(missing_ok=True)
                env = {"SLURM_JOB_ID": str(job_id), "SLURM_JOB_UID": "0",
                       "SLURM_JOB_USER": "root", "SLURM_JOB_NODELIST": ",".join(nodes)}
                t0 = time.perf_counter()
                subprocess.run([str(prolog)], env=env, capture_output=True, check=True,
                               timeout=120)
                times.append(time.perf_counter() - t0)
            out[f"{name}_median_s"] = round(statistics.median(times), 3)
            out[f"{name}_max_s"] = round(max(times), 3)
        out["mapped_wrote_rankfile"] = admin_rankfile(config, arnold_job).exists()
        out |= _python_prolog(plain_job, picked[:1], runs, against)
    finally:
        for job_id in (arnold_job, plain_job):
            slurm.cancel(job_id)
            admin_rankfile(config, job_id).unlink(missing_ok=True)
            admin_rankfile(config, job_id).with_suffix(".hosts").unlink(missing_ok=True)
    return out


def _python_prolog(job_id: int, nodes: list[str], runs: int,
                   against: Path | None) -> dict[str, Any]:
    """Median wall time of ``arnold-prolog`` (this install's, and ``against``'s, alternately)
    for a job that asks for nothing."""
    from benchmarks.backends import installed

    programs = {"python": Path(installed("arnold-prolog"))}
    if against is not None:
        programs["against"] = against / "bin" / "arnold-prolog"
        if not programs["against"].exists():
            raise ArnoldError(f"--against {against}: no bin/arnold-prolog there; give a venv "
                              "with slurm-arnold installed")
    env = {**os.environ, "SLURM_JOB_ID": str(job_id), "SLURM_JOB_UID": "0",
           "SLURM_JOB_USER": "root", "SLURM_JOB_NODELIST": ",".join(nodes)}
    times: dict[str, list[float]] = {name: [] for name in programs}
    for _ in range(runs):
        for name, program in programs.items():
            t0 = time.perf_counter()
            subprocess.run([str(program)], env=env, capture_output=True, check=True,
                           timeout=120)
            times[name].append(time.perf_counter() - t0)
    out: dict[str, Any] = {"nothing_asked_python_median_s":
                           round(statistics.median(times["python"]), 3)}
    if against is not None:
        other = statistics.median(times["against"])
        out["against"] = {"install": str(against), "nothing_asked_python_median_s":
                          round(other, 3),
                          "ratio": round(statistics.median(times["python"]) / other, 3)}
    return out


def run(quick: bool = False, live: bool = False,
        progress: Callable[[str], None] | None = None,
        against: Path | None = None) -> dict[str, Any]:
    """The whole benchmark (``quick``: 6 allocations on the 1k scale, 256 nodes)."""
    seeds = range(0, 12, 2) if quick else range(50)
    cases = []
    for seed in seeds:
        cases.append(allocation_case(seed))
        if progress:
            progress(f"allocation {len(cases)}/{len(seeds)}")
    worse_dp = sum(c["ours_dp"] > c["slurm_dp"] for c in cases)
    worse_pp = sum(c["ours_pp"] > c["slurm_pp"] for c in cases)
    ours = [c["ours_weighted"] for c in cases]
    theirs = [c["slurm_weighted"] for c in cases]
    result: dict[str, Any] = {
        "cases": cases,
        "summary": {
            "allocations": len(cases),
            "worse_dp": worse_dp, "worse_pp": worse_pp,
            "better_dp": sum(c["ours_dp"] < c["slurm_dp"] for c in cases),
            "better_pp": sum(c["ours_pp"] < c["slurm_pp"] for c in cases),
            "better_weighted": sum(o < t for o, t in zip(ours, theirs, strict=True)),
            "ours_mean_weighted": round(statistics.mean(ours), 3),
            "slurm_mean_weighted": round(statistics.mean(theirs), 3),
            "ratio": round(statistics.mean(ours) / statistics.mean(theirs), 3),
            "seconds_median": round(statistics.median(c["seconds"] for c in cases), 3),
            "seconds_max": round(max(c["seconds"] for c in cases), 3),
            "never_worse": worse_dp == 0 and worse_pp == 0,
        },
    }
    if progress:
        progress("the mapping at 1,024 nodes" if not quick else "the mapping at 256 nodes")
    result["at_scale"] = time_at(256 if quick else 1024, 1 if quick else 3)
    if live:
        if progress:
            progress("the local cluster's PrologSlurmctld")
        result["live"] = live_prolog(2 if quick else 5, against)
    return result


def markdown(result: dict[str, Any], command: str) -> str:
    """The docs section."""
    s, at = result["summary"], result["at_scale"]
    lines = [
        "## Ranks at job start: arnold-prolog vs Slurm's task order", "",
        f"Command: `{command}` (setup in `benchmarks/mapping.py`: random allocations of "
        "fragmented 1k- and 12k-GPU synthetic clusters, alternately; job shapes TP x PP in "
        f"{', '.join(f'{t}x{p}' for t, p in SHAPES)}; alpha 0.5).", "",
        f"- {s['allocations']} allocations: our mapping is worse than Slurm's default order in "
        f"DP spread **{s['worse_dp']}** times and in PP spread **{s['worse_pp']}** times "
        f"(never worse: {'yes' if s['never_worse'] else 'NO'}); better in DP {s['better_dp']}, "
        f"in PP {s['better_pp']}, in weighted spread {s['better_weighted']} times.",
        f"- Mean weighted spread: ours **{s['ours_mean_weighted']}**, Slurm's order "
        f"**{s['slurm_mean_weighted']}** (x{s['ratio']}); mapping time median "
        f"{s['seconds_median']} s, max {s['seconds_max']} s.",
        f"- The prolog's mapping at **{at['nodes']} nodes** (TP 8 x PP 8 on random free nodes "
        f"of a {at['cluster_nodes']}-node cluster, {at['runs']} clusters): median "
        f"**{at['median_s']} s**, max {at['max_s']} s (the prolog gives the MIP 5 s; what it "
        "has not proved by then stays Slurm's order or the best mapping found).",
    ]
    live = result.get("live")
    if live:
        lines.append(
            "- On the local cluster, slurmctld's PrologSlurmctld "
            f"(`{repo_relative(live['prolog'])}`, the site install): a {live['nodes']}-node "
            "`#ARNOLD` job mapped in median "
            f"**{live['mapped_median_s']} s** (max {live['mapped_max_s']} s); a job asking "
            f"for nothing (what every job pays at start) **{live['nothing_asked_median_s']} s** "
            f"(max {live['nothing_asked_max_s']} s); `arnold-prolog` itself, which the "
            "wrapper spares such jobs, "
            f"**{live.get('nothing_asked_python_median_s', '?')} s**.")
        other = live.get("against")
        if other:
            lines.append(
                f"- Side by side in the same run, `arnold-prolog` of "
                f"`{Path(other['install']).name}` (--against) for the same job: "
                f"**{other['nothing_asked_python_median_s']} s**; this install's over it: "
                f"x{other['ratio']}.")
    return "\n".join(lines)
