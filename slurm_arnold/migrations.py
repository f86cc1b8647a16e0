"""The state databases' schema: sqlite-utils migrations, applied in order by ``StateDB``.

Each step is ``(name, function)``; later parts add tables by appending a step here. The list is
plain data so that ``slurm_arnold.state`` can tell whether a database is current without
importing sqlite-utils, which imports numpy (a tenth of a second and a BLAS thread pool, paid by
every arnold-sbatch of every user); ``migrations()`` builds the sqlite-utils ``Migrations`` set
only when a step is pending or a caller asks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite_utils
    from sqlite_utils.migrations import Migrations

#: The name sqlite-utils records applied steps under, in its ``_sqlite_migrations`` table.
MIGRATION_SET = "slurm_arnold"


#: The ``jobs`` table (arnold-sbatch's records), also the only column names
#: ``StateDB.record_job``/``update_job`` put into SQL.
JOBS_COLUMNS: dict[str, type] = {
    "id": int,
    "created_at": float,
    "user": str,
    "slurm_job_id": int,
    "spec": str,  # JSON: the job's TP/PP/DP, GPUs per node, alpha, sbatch options
    "placement": str,  # JSON: the placement (assignment, metrics, solver info)
    "rankfile": str,
    "status": str,
}


def _create_jobs(db: sqlite_utils.Database) -> None:
    db["jobs"].create(JOBS_COLUMNS, pk="id")  # type: ignore[union-attr]
    db["jobs"].create_index(["slurm_job_id"])  # type: ignore[union-attr]


def _create_history(db: sqlite_utils.Database) -> None:
    # Finished jobs for the predictor (predictor/history.py), one row per (source, job id).
    db["history"].create(  # type: ignore[union-attr]
        {"source": str, "job_id": str, "user": str, "group": str, "partition": str, "qos": str,
         "name": str, "submit": int, "start": int, "end": int, "nodes": int, "gpus": int,
         "procs": int, "time_limit": int, "state": str, "exit_code": int},
        pk=("source", "job_id"),
    )
    db["history"].create_index(["submit"])  # type: ignore[union-attr]


def _create_reservations(db: sqlite_utils.Database) -> None:
    # reservations/ (records.py): our Slurm reservations (named arnold_<LPJ id>) and every admission
    # decision with the prediction behind it.
    db["reservations"].create(  # type: ignore[union-attr]
        {"name": str, "lpj_job_id": int, "user": str, "nodes": str, "expected_start": float,
         "weighted_spread": float, "source": str, "created_at": float, "state": str,
         "lpj_held": int, "released_at": float, "release_reason": str},
        pk="name",
    )
    db["admissions"].create(  # type: ignore[union-attr]
        {"id": int, "job_id": int, "user": str, "reservation": str, "decision": str,
         "source": str, "predictor": str, "predicted_s": float, "upper_s": float,
         "expected_start": float, "mode": str, "time_limit_min": int, "decided_at": float,
         "last_decided_at": float, "times": int},
        pk="id",
    )
    db["admissions"].create_index(["job_id", "reservation"])  # type: ignore[union-attr]


def _create_bindings(db: sqlite_utils.Database) -> None:
    # reservations/binder.py: every time sync placed a waiting job again (its planned nodes
    # failed, or enough others freed first), with the nodes before and after and why.
    db["bindings"].create(  # type: ignore[union-attr]
        {"id": int, "job_id": int, "user": str, "kind": str, "reason": str, "nodes": str,
         "previous": str, "weighted_spread": float, "previous_spread": float,
         "expected_start": float, "decided_at": float, "rankfile": str},
        pk="id",
    )
    db["bindings"].create_index(["job_id"])  # type: ignore[union-attr]


def _add_reservation_idle(db: sqlite_utils.Database) -> None:
    # reservations/sync.py: node-seconds a reservation's nodes ran nothing while its LPJ
    # waited (sampled at each sync), and the last sample.
    table = db["reservations"]
    table.add_column("idle_node_s", float, not_null_default=0.0)  # type: ignore[union-attr]
    table.add_column("idle_nodes", int)  # type: ignore[union-attr]
    table.add_column("idle_checked_at", float)  # type: ignore[union-attr]


def _create_prolog_runs(db: sqlite_utils.Database) -> None:
    # slurm_arnold/prolog.py: every run of arnold-prolog, what it did and how long slurmctld
    # waited for it (from its process's start).
    db["prolog_runs"].create(  # type: ignore[union-attr]
        {"id": int, "job_id": int, "user": str, "outcome": str, "seconds": float,
         "at": float},
        pk="id",
    )
    db["prolog_runs"].create_index(["job_id"])  # type: ignore[union-attr]


#: Every schema step, in the order it is applied.
STEPS: list[tuple[str, Callable[[sqlite_utils.Database], None]]] = [
    ("0001_jobs", _create_jobs),
    ("0002_history", _create_history),
    ("0003_reservations", _create_reservations),
    ("0004_bindings", _create_bindings),
    ("0005_reservation_idle", _add_reservation_idle),
    ("0006_prolog_runs", _create_prolog_runs),
]


def migrations() -> Migrations:
    """The sqlite-utils migration set of ``STEPS``."""
    from sqlite_utils.migrations import Migrations

    found = Migrations(MIGRATION_SET)
    for name, step in STEPS:
        found(name=name)(step)
    return found
