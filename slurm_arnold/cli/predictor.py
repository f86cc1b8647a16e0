"""``arnold predictor``: import job history, evaluate, predict, retrain."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from site_config import load_config
from slurm_arnold.cli.options import (
    Finite,
    json_option,
)
from slurm_arnold.cli.shared import progress, read_log
from slurm_arnold.errors import ArnoldError
from slurm_arnold.slurm import Slurm


@click.group()
def predictor() -> None:
    """The job-completion-time predictor (LightGBM)."""


def _import(source: str, items: Any, total: int | None) -> None:
    """Import records into the state database with a progress bar; report on stderr."""
    import itertools

    from predictor.history import import_records
    from predictor.swf import BadLine
    from slurm_arnold.site_state import open_site_db

    config = load_config()
    # Up to the first record (or the reader's error for a file with none) before the
    # database is touched: a bad file leaves nothing behind.
    rest = iter(items)
    head = []
    for item in rest:
        head.append(item)
        if not isinstance(item, BadLine):
            break
    items = itertools.chain(head, rest)
    state = open_site_db(config, write=True)
    with progress() as bar:
        task = bar.add_task(f"importing {source}", total=total)
        report = import_records(state, source, items,
                                progress=lambda n: bar.advance(task, n))
    click.echo(f"arnold: {report.summary()} into {config.db_path}", err=True)
    for bad in report.bad:
        logging.getLogger("arnold").info("bad line %d: %s", bad.line, bad.problem)


@predictor.group("import")
def predictor_import() -> None:
    """Import finished jobs into the history (idempotent: a re-import adds nothing)."""


@predictor_import.command("swf")
@click.argument("file", type=click.Path(dir_okay=False, exists=True))
def import_swf(file: str) -> None:
    """A Standard Workload Format log (plain or .gz)."""
    from predictor.swf import read_swf

    _import(f"swf:{Path(file).name}", read_swf(Path(file)), None)


@predictor_import.command("csv")
@click.argument("file", type=click.Path(dir_okay=False, exists=True))
def import_csv(file: str) -> None:
    """A CSV with the header job_id,user,group,partition,qos,name,submit,start,end,nodes,gpus,
    procs,time_limit,state,exit_code."""
    from predictor.swf import read_csv

    _import(f"csv:{Path(file).name}", read_csv(Path(file)), None)


@predictor_import.command("sacct")
@click.option("--since", help="Only jobs from this time on (sacct --starttime syntax).")
def import_sacct(since: str | None) -> None:
    """The live cluster's accounting (slurmdbd)."""
    from predictor.history import sacct_records

    records = sacct_records(Slurm(), since)
    _import("sacct", records, len(records))


@predictor.command("evaluate")
@click.option("--swf", "swf_file", type=click.Path(dir_okay=False, exists=True),
              help="A Standard Workload Format log (plain or .gz).")
@click.option("--csv", "csv_file", type=click.Path(dir_okay=False, exists=True),
              help="A CSV job history with the documented header.")
@click.option("--quantile", type=Finite(0.5, 0.99), default=0.9, show_default=True,
              help="Quantile of the upper model.")
@click.option("--db", "from_db", is_flag=True, help="The imported history in the state database.")
@click.option("--plot", type=click.Path(dir_okay=False),
              help="Write a calibration plot (PNG) of predicted vs actual run time here.")
@json_option()
def predictor_evaluate(swf_file: str | None, csv_file: str | None, from_db: bool,
                       quantile: float, plot: str | None, as_json: bool) -> None:
    """Train on the first 70% of a log (by submit time), test on the rest, beside the baselines."""
    from predictor.evaluate import evaluate
    from predictor.history import load_history
    from predictor.swf import BadLine, JobRecord
    from slurm_arnold.site_state import open_site_db

    if from_db:
        if swf_file or csv_file:
            raise click.UsageError("give one of --swf, --csv and --db")
        items: list[Any] = load_history(open_site_db(load_config()))
    else:
        items = read_log(swf_file, csv_file)
    jobs = [i for i in items if isinstance(i, JobRecord)]
    bad = [i for i in items if isinstance(i, BadLine)]
    if bad:
        click.echo(f"arnold: {len(bad)} unreadable lines skipped (first: line {bad[0].line}: "
                   f"{bad[0].problem})", err=True)
    result = evaluate(jobs, quantile=quantile, keep_predictions=plot is not None)
    result["n_bad_lines"] = len(bad)
    if plot:
        from predictor.plots import calibration_plot

        calibration_plot(result.pop("predictions"), Path(plot))
        click.echo(f"arnold: calibration plot written to {plot}", err=True)
    if as_json:
        click.echo(json.dumps(result))
        return
    table = Table(title=f"{result['n_train']} train / {result['n_test']} test jobs "
                        f"({result['n_excluded']} without run or requested time)")
    keys = ("mae_h", "rmse_h", "mae_log", "rmse_log", "coverage")
    table.add_column("method")
    for k in keys:
        table.add_column(k)
    for name, m in result["methods"].items():
        table.add_row(name, *(f"{m[k]:.3f}" for k in keys))
    Console(soft_wrap=True).print(table)


@predictor.command("predict")
@click.option("--job", "job_id", type=int, help="A pending job of the live queue.")
@click.option("--user", help="Job spec: the user (default: you).")
@click.option("--time", "time_limit", help="Job spec: requested time (minutes, or [D-]HH:MM:SS).")
@click.option("--procs", type=click.IntRange(min=1), help="Job spec: processors or GPUs.")
@click.option("--group", default="", help="Job spec: group or account.")
@click.option("--partition", default="", help="Job spec: partition.")
@click.option("--qos", default="", help="Job spec: QOS (the queue, in SWF logs).")
@json_option()
def predictor_predict(job_id: int | None, user: str | None, time_limit: str | None,
                      procs: int | None, group: str, partition: str, qos: str,
                      as_json: bool) -> None:
    """Point and quantile run time of a job, with the features behind the point prediction."""
    import getpass
    import time as clock

    from predictor.history import load_history
    from predictor.service import job_from_queue, load_serving, predict_job, queue_load
    from predictor.swf import JobRecord
    from slurm_arnold.site_state import caller, open_site_db
    from slurm_arnold.slurm import parse_time_limit

    config = load_config()
    load_now = None
    if job_id is not None:
        slurm = Slurm()
        job, load_now = job_from_queue(slurm, job_id)
        if job.user != caller():
            from slurm_arnold.admins import NotAdmin, require_admin

            try:
                require_admin(slurm, "predictor predict --job")
            except NotAdmin:
                raise ArnoldError(f"job {job_id} belongs to {job.user}; only {job.user} or an "
                                  "admin may see its prediction") from None
    else:
        if time_limit is None:
            raise click.UsageError("give --job ID or a job spec with at least --time")
        try:
            seconds = parse_time_limit(time_limit)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--time") from None
        job = JobRecord("spec", user or getpass.getuser(), group, partition, qos, "",
                        int(clock.time()), None, None, None, None, procs, seconds,
                        "PENDING", None)
    model = load_serving(config)
    if load_now is None:
        try:
            load_now = queue_load(Slurm().jobs(unfinished=True), job.user,
                                  time_limit=job.time_limit, now=job.submit)
        except ArnoldError as exc:
            click.echo(f"arnold: no live queue ({exc}); queue-load features taken as empty",
                       err=True)
            load_now = {"active": 0.0, "running": 0.0, "u_active": 0.0,
                        "u_run_elapsed": math.nan, "u_run_same_elapsed": math.nan}
    # Only the user's own history matters once the load comes from the queue.
    history = load_history(open_site_db(config), user=job.user)
    pred = predict_job(model, job, history, load_now)
    if as_json:
        click.echo(json.dumps(pred.as_dict()))
        return
    click.echo(f"point {pred.point / 3600:.2f} h, q{pred.quantile:g} upper "
               f"{pred.upper / 3600:.2f} h (requested "
               f"{(pred.requested or 0) / 3600:.2f} h; user's baseline "
               f"{pred.baseline / 3600:.2f} h)")
    from predictor.service import describe

    for name, value, effect in pred.reasons:
        click.echo(f"  {name} = {describe(name, value)}: x{math.exp(effect):.2f}")


@predictor.command("retrain")
@click.option("--since", help="Import sacct jobs from this time on (default: all).")
@click.option("--no-import", is_flag=True, help="Train on the history as it is.")
@click.option("--force", is_flag=True, help="Swap even when the new model is worse.")
@json_option()
def predictor_retrain(since: str | None, no_import: bool, force: bool, as_json: bool) -> None:
    """Import finished jobs from sacct, retrain, and swap the model in if it is not worse."""
    from predictor.service import retrain
    from slurm_arnold.site_state import open_site_db

    config = load_config()
    slurm = None if no_import else Slurm()
    if slurm is not None:
        slurm.require_config()  # before the site's state is opened (and made)
    result = retrain(config, open_site_db(config, write=True), slurm=slurm,
                     since=since, force=force)
    if as_json:
        click.echo(json.dumps(result))
        return
    serving = result.get("serving")
    verdict = "swapped in" if result["swapped"] else "kept the serving model"
    click.echo(f"imported {result['imported']} jobs; {result['history_jobs']} in history; "
               f"new mae_log {result['candidate']['mae_log']:.3f}"
               + (f" vs serving {serving['mae_log']:.3f}" if serving else "")
               + (f" ({result['reason']})" if "reason" in result else "")
               + f"; {verdict}: {result['model_dir']}")

