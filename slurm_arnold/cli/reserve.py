"""``arnold reserve``: our Slurm reservations for large jobs (list, plan, create, release,
sync). ``list`` and ``plan`` are for everyone; the rest are admin-only."""

from __future__ import annotations

import json
import time
from typing import Any

import click
import hostlist

from site_config import load_config
from slurm_arnold.cli.options import json_option
from slurm_arnold.errors import ArnoldError


def _reserver(admin_action: str | None = None) -> Any:
    """The reserver over the site's state: read-only for everyone, written only after the
    caller is found to be an admin (``admin_action``)."""
    from reservations.reserver import Reserver
    from slurm_arnold.admins import require_admin
    from slurm_arnold.site_state import open_site_db
    from slurm_arnold.slurm import Slurm

    config = load_config()
    slurm = Slurm()
    slurm.require_config()  # before the site's state is opened (and, for an admin, made)
    if admin_action is not None:
        require_admin(slurm, f"reserve {admin_action}")
    return Reserver(config, open_site_db(config, write=admin_action is not None), slurm)


def _own_job_or_admin(reserver: Any, job_id: int, action: str) -> None:
    """Refuse ``action`` on another user's job unless the caller is an admin."""
    from slurm_arnold.admins import NotAdmin, require_admin
    from slurm_arnold.site_state import caller

    job = next((j for j in reserver.slurm.jobs() if j.job_id == job_id), None)
    if job is None or job.user == caller():
        return
    try:
        require_admin(reserver.slurm, f"reserve {action}")
    except NotAdmin:
        raise ArnoldError(f"job {job_id} belongs to {job.user}; only {job.user} or an admin "
                          f"may run `arnold reserve {action}` on it") from None


def _when(t: float | None) -> str:
    if t is None:
        return "-"
    left = t - time.time()
    stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(t))
    return f"{stamp} (now)" if left <= 60 else f"{stamp} (in {left / 60:.0f} min)"


@click.group("reserve")
def reserve() -> None:
    """Reservations for large pending jobs (LPJs) and the short jobs admitted into them."""


@reserve.command("list")
@json_option("one JSON array")
def reserve_list(as_json: bool) -> None:
    """Our reservations: LPJ, nodes, expected start, admitted short jobs."""
    rows = _reserver().listing()
    if as_json:
        click.echo(json.dumps(rows))
        return
    if not rows:
        click.echo("no arnold reservations")
        return
    from slurm_arnold.cli.tables import show
    from slurm_arnold.cli.tables import table as new_table

    table = new_table("reservation", "LPJ", "user", "nodes", "expected start", "spread",
                      "admitted", "state")
    for r in rows:
        table.add_row(r["name"], f"{r['lpj_job_id']} ({r['lpj_state']})", str(r["user"]),
                      hostlist.collect_hostlist(r["nodes"]), _when(r["expected_start"]),
                      "-" if r["weighted_spread"] is None else f"{r['weighted_spread']:.2f}",
                      ",".join(map(str, r["admitted"])) or "-", r["state"])
    show(table)


@reserve.command("plan")
@click.argument("job_id", type=int)
@json_option()
def reserve_plan(job_id: int, as_json: bool) -> None:
    """Where LPJ JOB_ID would be reserved, and why (a dry run: changes nothing)."""
    reserver = _reserver()
    _own_job_or_admin(reserver, job_id, "plan")
    plan = reserver.plan(job_id)
    doc = plan.as_json()
    if as_json:
        click.echo(json.dumps(doc))
        return
    click.echo(f"job {job_id} ({plan.job.user}, {plan.job.gpus} GPUs): "
               f"{hostlist.collect_hostlist(list(plan.nodes))}")
    click.echo(f"  nodes from: {plan.source}; expected start {_when(plan.expected_start)} "
               f"by {plan.predictor} predictions of the running jobs; weighted spread "
               f"{plan.spread:.2f}")
    weight = reserver.config.reservation.spread_weight_h
    for c in doc["candidates"]:
        wait_h = max(0.0, c["start"] - time.time()) / 3600
        click.echo(f"  pool of the {c['pool_nodes']} nodes that drain first: start in "
                   f"{wait_h:.2f} h, spread {c['weighted_spread']:.2f}, cost "
                   f"{wait_h + weight * c['weighted_spread']:.2f} (h + {weight} h x spread)")
    horizon = reserver.config.reservation.horizon_h
    click.echo("  imminent: a `sync` reserves it now" if plan.imminent else
               f"  not imminent (beyond {horizon} h): `sync` waits; `create` reserves anyway")


@reserve.command("create")
@click.argument("job_id", type=int)
def reserve_create(job_id: int) -> None:
    """Reserve LPJ JOB_ID's planned nodes now and bind it (admin)."""
    reserver = _reserver("create")
    with reserver.lock():
        name = reserver.create(job_id)
    for line in reserver.actions:
        click.echo(line, err=True)
    click.echo(name)


@reserve.command("release")
@click.argument("target")
def reserve_release(target: str) -> None:
    """Delete our reservation TARGET (its name, or its LPJ's job id) (admin)."""
    from slurm_arnold.snapshot.queue import reservation_name

    reserver = _reserver("release")
    name = reservation_name(int(target)) if target.isdigit() else target
    names = {r["name"] for r in reserver.listing()}
    if name not in names:
        raise ArnoldError(f"no arnold reservation {name}; see `arnold reserve list`")
    with reserver.lock():
        done = reserver.release(name, "released by an admin")
    for line in reserver.actions:
        click.echo(line, err=True)
    if not done:
        click.echo(f"{name}: jobs still run in it; shrunk to their nodes, the next "
                   "`arnold reserve sync` deletes it", err=True)


@reserve.command("sync")
@json_option("the actions as one JSON array")
def reserve_sync(as_json: bool) -> None:
    """One idempotent pass: make missing reservations, admit or refuse short jobs, delete
    reservations whose LPJ is gone (admin; run every minute from cron or scrontab)."""
    reserver = _reserver("sync")
    with reserver.lock():
        actions = reserver.sync()
    if as_json:
        click.echo(json.dumps(actions))
        return
    for line in actions:
        click.echo(line)
