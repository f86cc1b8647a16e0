"""``arnold bench site``: a log-shaped stream from many users on the live cluster, the admin
loop beside it, faults injected, and the same stream with plain sbatch as the baseline."""

from __future__ import annotations

import json
from pathlib import Path

import click

from benchmarks.site_faults import KINDS as FAULT_NAMES
from slurm_arnold.cli.options import Finite, docs_option, json_option, quick_option

#: The smoke ``make test`` runs (about three minutes on the 64-node local cluster).
QUICK = {"jobs": 200, "users": 6, "submit_s": 40.0, "work_s": 50.0, "sync_every": 10.0,
         "down_s": 15.0, "deadline_s": 170.0}


@click.command("site")
@quick_option("200 jobs, 6 users, two faults (slurmctld, sync), no baseline: ~3 minutes")
@click.option("--log", default="SDSC-SP2", show_default=True,
              help="The shared SWF log the stream is shaped like.")
@click.option("--data", type=click.Path(file_okay=False), default="../shared/data/swf",
              show_default=True, help="Where the shared SWF logs are.")
@click.option("--jobs", "n_jobs", type=click.IntRange(min=10), default=5000, show_default=True,
              help="Jobs in the stream.")
@click.option("--users", type=click.IntRange(min=1, max=99), default=20, show_default=True,
              help="Unix users submitting (made when missing).")
@click.option("--submit-minutes", type=Finite(min=0.1), default=15.0, show_default=True,
              help="The stream's arrivals are spread over this long (the log's gaps kept).")
@click.option("--work-minutes", type=Finite(min=0.1), default=25.0, show_default=True,
              help="Run times are scaled so that all the jobs' work would fill every node "
                   "this long.")
@click.option("--sync-every", type=Finite(min=1.0), default=30.0, show_default=True,
              help="Seconds between `arnold reserve sync` passes (the admin loop).")
@click.option("--faults", default="all", show_default=True,
              help="Faults to inject, comma-separated (all, none, or some of: "
                   f"{', '.join(FAULT_NAMES)}; state-full needs the cluster's state directory "
                   "on a file system of its own, ARNOLD_DEV_STATE_MB).")
@click.option("--down", "down_s", type=Finite(min=1.0), default=60.0, show_default=True,
              help="Seconds a killed daemon stays down (slurmdbd: at least 3 minutes).")
@click.option("--large-nodes", type=click.IntRange(min=2), default=32, show_default=True,
              help="Jobs of this many nodes or more go through arnold-sbatch.")
@click.option("--baseline/--no-baseline", default=True, show_default=True,
              help="Replay the stream with plain sbatch afterwards.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Moves the faults' moments.")
@click.option("--passes", "passes_log", type=click.Path(dir_okay=False, writable=True),
              default=None, help="Append each pass of the admin loop to this file (JSON "
              "lines: when, seconds, exit status, its actions and warnings).")
@docs_option
@json_option()
def bench_site(quick: bool, log: str, data: str, n_jobs: int, users: int,
               submit_minutes: float, work_minutes: float, sync_every: float, faults: str,
               down_s: float, large_nodes: int, baseline: bool, seed: int,
               passes_log: str | None, docs: str, as_json: bool) -> None:
    """A site's size and its faults on the live cluster (root)."""
    from benchmarks.site_faults import FULL, KINDS, SMOKE
    from benchmarks.site_run import SiteSpec, markdown, run

    names: tuple[str, ...]
    if faults == "all":
        names = SMOKE if quick else FULL
    elif faults == "none":
        names = ()
    else:
        names = tuple(f.strip() for f in faults.split(",") if f.strip())
        stray = [f for f in names if f not in KINDS]
        if stray:
            raise click.BadParameter(f"unknown fault {stray[0]!r}; use all, none or some of "
                                     f"{', '.join(KINDS)}", param_hint="--faults")
    spec = SiteSpec(log=log, data_dir=Path(data), jobs=n_jobs, users=users,
                    submit_s=submit_minutes * 60, work_s=work_minutes * 60,
                    sync_every=sync_every, faults=names, down_s=down_s, baseline=baseline,
                    seed=seed, large_nodes=large_nodes,
                    passes_log=Path(passes_log) if passes_log else None)
    if quick:
        spec = SiteSpec(log=log, data_dir=Path(data), jobs=int(QUICK["jobs"]),
                        users=int(QUICK["users"]), submit_s=QUICK["submit_s"],
                        work_s=QUICK["work_s"], sync_every=QUICK["sync_every"], faults=names,
                        down_s=QUICK["down_s"], baseline=False, seed=seed,
                        large_nodes=large_nodes, deadline_s=QUICK["deadline_s"],
                        passes_log=spec.passes_log)
    result = run(spec, progress=lambda what: click.echo(f"arnold: bench site: {what}",
                                                         err=True))
    # The command that reruns it, as run (the quick one's sizes are its own).
    command = ("arnold bench site --quick" if quick else
               f"arnold bench site --log {log} --jobs {n_jobs} --users {users} "
               f"--submit-minutes {submit_minutes:g} --work-minutes {work_minutes:g} "
               f"--sync-every {sync_every:g} --down {down_s:g} --large-nodes {large_nodes}"
               + ("" if baseline else " --no-baseline"))
    command += f" --faults {faults} --seed {seed}"
    if not quick:
        from benchmarks.placement import write_section

        write_section(Path(docs), "site", markdown(result, command))
    if as_json:
        click.echo(json.dumps(result))
        return
    click.echo(markdown(result, command))
