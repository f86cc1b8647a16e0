"""The state database: one SQLite file (WAL) owned by this module, migrated by sqlite-utils.

Later parts add their tables by registering migrations on ``MIGRATIONS`` here; migrations are
applied in order, each in its own transaction, when the database is opened.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlite_utils
from sqlite_utils.migrations import Migrations

from slurm_arnold.errors import StateError

MIGRATIONS = Migrations("slurm_arnold")


@MIGRATIONS(name="0001_jobs")
def _create_jobs(db: sqlite_utils.Database) -> None:
    db["jobs"].create(  # type: ignore[union-attr]
        {
            "id": int,
            "created_at": float,
            "user": str,
            "slurm_job_id": int,
            "spec": str,  # JSON: the job's TP/PP/DP, GPUs per node, alpha, sbatch options
            "placement": str,  # JSON: the placement (assignment, metrics, solver info)
            "rankfile": str,
            "status": str,
        },
        pk="id",
    )
    db["jobs"].create_index(["slurm_job_id"])  # type: ignore[union-attr]


@MIGRATIONS(name="0002_history")
def _create_history(db: sqlite_utils.Database) -> None:
    # Finished jobs for the predictor (predictor/history.py), one row per (source, job id).
    db["history"].create(  # type: ignore[union-attr]
        {"source": str, "job_id": str, "user": str, "group": str, "partition": str, "qos": str,
         "name": str, "submit": int, "start": int, "end": int, "nodes": int, "gpus": int,
         "procs": int, "time_limit": int, "state": str, "exit_code": int},
        pk=("source", "job_id"),
    )
    db["history"].create_index(["submit"])  # type: ignore[union-attr]


@MIGRATIONS(name="0003_reservations")
def _create_reservations(db: sqlite_utils.Database) -> None:
    # reservations/live.py: our Slurm reservations (named arnold_<LPJ id>) and every admission
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


class StateDB:
    """The project's SQLite state (WAL, busy timeout, migrations applied on open).

    Raises ``StateError`` when the file cannot be opened or is not a database.
    """

    def __init__(self, path: Path | str, *, busy_timeout_ms: int = 30_000) -> None:
        self.path = Path(path)
        deadline = time.monotonic() + busy_timeout_ms / 1000
        while True:
            try:
                self._open(busy_timeout_ms)
                return
            except sqlite3.OperationalError as exc:
                # Switching a new file to WAL needs a moment of exclusive access, and SQLite
                # reports "locked" at once, without the busy handler, when several processes
                # create the database together: retry until the busy timeout.
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise StateError(
                        f"{self.path}: cannot open the state database ({exc}); "
                        "check the file or move it aside to start afresh"
                    ) from None
                time.sleep(0.05)
            except sqlite3.DatabaseError as exc:
                raise StateError(
                    f"{self.path}: cannot open the state database ({exc}); "
                    "check the file or move it aside to start afresh"
                ) from None
            except OSError as exc:
                raise StateError(
                    f"{self.path}: cannot create the state directory ({exc.strerror}); "
                    "set state_dir in arnold.toml or ARNOLD_STATE_DIR"
                ) from None

    def _open(self, busy_timeout_ms: int) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(self.path), timeout=busy_timeout_ms / 1000,
                               isolation_level=None)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA foreign_keys = ON")
            self.db = sqlite_utils.Database(conn)
            self._migrate()
        except BaseException:
            conn.close()
            raise

    @contextmanager
    def transaction(self) -> Iterator[sqlite_utils.Database]:
        """A write transaction that takes the write lock up front (``BEGIN IMMEDIATE``).

        A deferred transaction that reads and then writes can fail at once with "database is
        locked" when another process writes in between; taking the lock first makes concurrent
        writers wait their turn (up to the busy timeout) instead. sqlite-utils operations inside
        nest as savepoints.
        """
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            if self.db.conn.in_transaction:
                self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def _migrate(self) -> None:
        # Pending migrations are checked and applied under the write lock, so two processes
        # opening a new database at once never both apply one.
        if not MIGRATIONS.pending(self.db):
            return
        with self.transaction():
            MIGRATIONS.apply(self.db)

    def applied_migrations(self) -> list[str]:
        """Names of the migrations applied to this database, in order."""
        return [m.name for m in MIGRATIONS.applied(self.db)]

    def integrity_ok(self) -> bool:
        """Whether ``PRAGMA integrity_check`` reports ``ok``."""
        row = self.db.execute("PRAGMA integrity_check").fetchone()
        return bool(row and row[0] == "ok")

    def journal_mode(self) -> str:
        """The journal mode in force (``wal``)."""
        return str(self.db.execute("PRAGMA journal_mode").fetchone()[0])

    def record_job(self, record: dict[str, Any]) -> int:
        """Insert a job record; return its id."""
        with self.transaction():
            table = self.db.table("jobs")
            table.insert(dict(record, created_at=record.get("created_at", time.time())))
            return int(str(table.last_pk))

    def jobs(self, limit: int = 100) -> list[dict[str, Any]]:
        """The most recent job records, newest first."""
        return list(self.db.table("jobs").rows_where(order_by="id desc", limit=limit))

    def job(self, slurm_job_id: int) -> dict[str, Any] | None:
        """The latest record of a Slurm job submitted through arnold-sbatch, or None."""
        rows = self.db.table("jobs").rows_where("slurm_job_id = ?", [slurm_job_id],
                                                 order_by="id desc", limit=1)
        return next(iter(rows), None)

    def close(self) -> None:
        """Close the connection."""
        self.db.close()
