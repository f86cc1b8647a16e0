"""``arnold sim``: replay a job log with Slurm's backfill or Arnold's reservations."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from site_config import load_config
from slurm_arnold.cli.options import (
    Finite,
    json_option,
    minipod_level_option,
    sim_settings,
    topology_option,
)
from slurm_arnold.cli.shared import progress, read_log
from slurm_arnold.placement.engine import (
    OFFLINE_ALGOS,
)
from slurm_arnold.sim import PREDICTORS
from slurm_arnold.topology import read_topology_file


@click.command("sim")
@click.option("--swf", "swf_file", type=click.Path(dir_okay=False, exists=True),
              help="A Standard Workload Format log (plain or .gz).")
@click.option("--csv", "csv_file", type=click.Path(dir_okay=False, exists=True),
              help="A CSV job history with the documented header.")
@topology_option("The fat tree to replay on (topology.conf format).", required=True)
@click.option("--gpus-per-node", type=click.IntRange(min=1), default=8, show_default=True,
              help="GPUs per node.")
@click.option("--gpus-per-proc", type=Finite(min=0, min_open=True), default=1.0,
              show_default=True, help="GPUs per processor of the log.")
@click.option("--lpj-gpus", type=click.IntRange(min=1), default=256, show_default=True,
              help="A job with at least this many GPUs is a large job (LPJ).")
@click.option("--policy", type=click.Choice(["slurm", "arnold"]), required=True,
              help="Slurm's backfill, or Arnold's reservations on top of it.")
@click.option("--predictor", "predictor_name", type=click.Choice(PREDICTORS),
              help="Run-time predictor [default: model_q for arnold, requested for slurm].")
@click.option("--mode", type=click.Choice(["share", "shrink"]), default="share",
              show_default=True, help="What an admitted short job risks (arnold only).")
@click.option("--placement", type=click.Choice(OFFLINE_ALGOS),
              default="mip", show_default=True, help="How arnold lays out an LPJ.")
@minipod_level_option()
@click.option("--depth", type=click.IntRange(min=1), default=100, show_default=True,
              help="Pending jobs tested per scheduling pass (bf_max_job_test).")
@click.option("--max-reservations", type=click.IntRange(min=0), default=4, show_default=True,
              help="LPJ reservations at once (arnold).")
@click.option("--spread-weight-h", type=Finite(min=0), default=1.0,
              show_default=True, help="Hours of expected wait one unit of spread is worth.")
@click.option("--horizon-h", type=Finite(min=0, min_open=True), default=2.0,
              show_default=True, help="Reserve only LPJs whose nodes drain within this.")
@click.option("--keep-domains-whole/--no-keep-domains-whole", default=True, show_default=True,
              help="On a topology with NVLink domains (blocks): arnold picks nodes of partly "
                   "used domains before whole ones.")
@click.option("--jobs-csv", type=click.Path(dir_okay=False, writable=True),
              help="Also write each job's submit, start, end and wait to this CSV.")
@click.option("--skip-jobs", type=click.IntRange(min=0), default=0, show_default=True,
              help="Replay the log's jobs after its first this many (readable ones).")
@click.option("--max-jobs", type=click.IntRange(min=1),
              help="Replay at most this many jobs (after --skip-jobs) [default: all].")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", callback=sim_settings,
              help="Set any other simulator setting (SimSettings; docs/sim.md), e.g. "
                   "--set lpj_jumps_pay=expected --set plans_past_reservations=true. "
                   "Repeatable.")
@json_option()
def sim_cmd(swf_file: str | None, csv_file: str | None, topology_file: str,
            gpus_per_node: int, gpus_per_proc: float, lpj_gpus: int, policy: str,
            predictor_name: str | None, mode: str, placement: str, minipod_level: int | None,
            depth: int, max_reservations: int, spread_weight_h: float, horizon_h: float,
            keep_domains_whole: bool, jobs_csv: str | None, skip_jobs: int,
            max_jobs: int | None, overrides: tuple[tuple[str, Any], ...], as_json: bool) -> None:
    """Replay a job log on a fat tree under Slurm's backfill or Arnold's policy."""
    from predictor.swf import BadLine, JobRecord
    from slurm_arnold.sim.cluster import SimCluster
    from slurm_arnold.sim.engine import Simulation
    from slurm_arnold.sim.jobs import build_workload, open_jobs_csv, write_jobs_csv
    from slurm_arnold.sim.settings import SimSettings

    items = read_log(swf_file, csv_file)
    bad = [i for i in items if isinstance(i, BadLine)]
    if bad:
        click.echo(f"arnold: {len(bad)} unreadable lines skipped (first: line {bad[0].line}: "
                   f"{bad[0].problem})", err=True)
    if minipod_level is None:
        minipod_level = load_config().minipod_level
    topo = read_topology_file(topology_file, minipod_level=minipod_level)
    cluster = SimCluster(topo, gpus_per_node)
    records = [i for i in items if isinstance(i, JobRecord)]
    # The slices of `arnold bench sim` (e.g. its --held-out jobs) are cut the same way.
    records = records[skip_jobs:None if max_jobs is None else skip_jobs + max_jobs]
    if not records:
        raise click.UsageError(f"--skip-jobs {skip_jobs} leaves no job of the log's "
                               f"{len(items) - len(bad)}; skip fewer")
    workload = build_workload(records, gpus_per_node=gpus_per_node, gpus_per_proc=gpus_per_proc,
                              cluster_gpus=cluster.total_gpus, lpj_gpus=lpj_gpus)
    settings = SimSettings(policy=policy, mode=mode, placement=placement,
                           predictor=predictor_name or ("model_q" if policy == "arnold"
                                                        else "requested"),
                           depth=depth, max_reservations=max_reservations,
                           spread_weight_h=spread_weight_h, reserve_horizon_h=horizon_h,
                           keep_domains_whole=keep_domains_whole)
    settings = dataclasses.replace(settings, **dict(overrides))
    sink = open_jobs_csv(Path(jobs_csv)) if jobs_csv else contextlib.nullcontext()
    with sink as out, progress() as bar:
        task = bar.add_task(f"sim {policy}", total=len(workload.jobs))
        replay = Simulation(cluster, workload, settings,
                            progress=lambda n: bar.advance(task, n))
        result = replay.run()
        if out is not None:
            write_jobs_csv(out, replay.jobs)
    result["n_bad_lines"] = len(bad)
    if as_json:
        click.echo(json.dumps(result))
        return
    table = Table(title=f"{policy} ({settings.predictor}"
                        + (f", {mode}" if policy == "arnold" else "") + f"): "
                        f"{result['jobs']} jobs, {result['lpjs']} LPJs")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key in ("utilization", "mean_wait_h", "bounded_slowdown", "lpj_mean_wait_h",
                "lpj_p95_wait_h", "lpj_mean_weighted_spread", "backfilled_in_reservations",
                "reserved_idle_node_h", "lpj_delay_h_from_mispredictions", "killed_jobs",
                "dropped_jobs") + (("domains", "whole_domains_free_mean")
                                   if result["domains"] else ()):
        table.add_row(key, str(result[key]))
    Console(soft_wrap=True).print(table)
