"""``arnold jobs``: what arnold-sbatch submitted for the caller, and where it went."""

from __future__ import annotations

import json

import click
import hostlist

from site_config import load_config
from slurm_arnold.cli.options import (
    json_option,
)

#: A job's status after the admin side's last move of it (``bindings.kind``).
BINDING_STATUS = {"bind": "bound", "repair": "repaired", "replan": "replanned",
                  "start": "mapped at start"}


@click.command("jobs")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True,
              help="How many of the most recent jobs.")
@json_option("one JSON list")
def jobs_cmd(limit: int, as_json: bool) -> None:
    """Jobs submitted through arnold-sbatch: shape, placement, spreads, nodes (and the
    rank-order file with ``arnold -v jobs``; everything in --json)."""
    from reservations.records import Records
    from slurm_arnold.errors import StateError
    from slurm_arnold.site_state import caller, open_site_db, open_user_db, user_db_path

    config = load_config()
    mine = user_db_path(config, caller())
    # Listing makes nothing: a user who never submitted has no database yet.
    db = open_user_db(config) if mine.exists() else None
    records = db.jobs(limit=limit) if db is not None else []
    moves: dict[int, list[dict[str, object]]] = {}
    try:  # the admin side's later moves of these jobs (reservations.binder)
        if records and config.db_path.exists():
            moves = Records(open_site_db(config)).bindings_of(
                [int(r["slurm_job_id"]) for r in records if r["slurm_job_id"]])
    except StateError:
        pass
    rows = []
    for r in records:
        spec = json.loads(r["spec"] or "{}")
        placement = json.loads(r["placement"] or "{}")
        row = {
            "id": r["id"], "slurm_job_id": r["slurm_job_id"], "user": r["user"],
            "status": r["status"], "tp": spec.get("tp"), "pp": spec.get("pp"),
            "dp": spec.get("dp"), "placement": spec.get("placement"),
            "alpha": spec.get("alpha"), "metrics": placement.get("metrics"),
            "nodes": placement.get("nodes", []), "rankfile": r["rankfile"], "binding": None,
        }
        history = moves.get(int(r["slurm_job_id"] or 0))
        if history:
            last = history[-1]
            row["binding"] = {"kind": last["kind"], "reason": last["reason"],
                              "decided_at": last["decided_at"],
                              "previous": json.loads(str(last["previous"] or "[]")),
                              "weighted_spread": last["weighted_spread"], "moves": len(history)}
            row["nodes"] = json.loads(str(last["nodes"]))
            row["rankfile"] = last["rankfile"]
            row["status"] = BINDING_STATUS.get(str(last["kind"]), str(last["kind"]))
        rows.append(row)
    if as_json:
        click.echo(json.dumps(rows))
        return
    from rich import box
    from rich.table import Table

    from slurm_arnold.cli.tables import show

    # Every job here is the caller's, so no user column; a rank file's path (its user's jobs
    # directory, or the admin side's) would fold into a dozen lines at 80 columns: with -v,
    # and in --json. Short columns never wrap, the rest fold (never cut to "...").
    whole = click.get_current_context().find_root().params.get("verbose", 0) > 0
    columns = ["job", "status", "TPxPPxDP", "placement", "DP/PP", "nodes",
               *(["rank-order file"] if whole else [])]
    table = Table(title=f"arnold jobs of {caller()}" + (f" ({mine})" if whole else ""),
                  box=box.SIMPLE_HEAD, pad_edge=False)
    for name in columns:
        table.add_column(name, overflow="fold", no_wrap=name in ("job", "TPxPPxDP", "DP/PP"))
    for row in rows:
        m = row["metrics"] or {}
        table.add_row(str(row["slurm_job_id"]), row["status"],
                      f"{row['tp']}x{row['pp']}x{row['dp']}", str(row["placement"]),
                      f"{m.get('max_dp_spread')}/{m.get('max_pp_spread')}",
                      hostlist.collect_hostlist(row["nodes"]),
                      *([str(row["rankfile"] or "")] if whole else []))
    show(table)

