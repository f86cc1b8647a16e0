"""The state databases: SQLite files owned by this module, migrated by sqlite-utils.

Two of them (``slurm_arnold.site_state`` says where and why): the site's, written by the admin
side and read by every user, and each user's own, written by that user's arnold-sbatch. Both
have the same schema. Later parts add tables by registering migrations on ``MIGRATIONS`` here;
migrations are applied in order, each in its own transaction, when a writer opens the file.

Journal modes: a user's own database is WAL (concurrent readers never block its writer). The
site database uses a rollback journal (``DELETE``): SQLite cannot open a WAL database read-only
from a directory the reader may not write (it must create the ``-shm`` index there), and users
may read the site's state but never write into its directory. Its writers are the admin
side's few short passes, so WAL's concurrency would buy little there.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import sqlite_utils
from sqlite_utils.migrations import Migrations

from slurm_arnold.errors import StateError

MIGRATIONS = Migrations("slurm_arnold")
log = logging.getLogger(__name__)


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


@MIGRATIONS(name="0004_bindings")
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


#: Mode of every database file we create (the -journal/-wal/-shm files follow it).
DB_FILE_MODE = 0o644
READONLY_HINT = ("it is written by the admin side only (`arnold reserve sync`, `arnold "
                 "predictor retrain`, `arnold site init`)")


class StateDB:
    """The project's SQLite state (busy timeout, migrations applied on open by writers).

    ``journal`` is ``wal`` (a user's own database) or ``delete`` (the site's, which others
    open with ``readonly=True``). Raises ``StateError`` when the file cannot be opened, is
    not a database, or a read-only caller finds its schema older than this program's.
    """

    def __init__(self, path: Path | str, *, busy_timeout_ms: int = 30_000,
                 journal: Literal["wal", "delete"] = "wal", readonly: bool = False) -> None:
        self.path = Path(path)
        self.journal = journal
        self.readonly = readonly
        deadline = time.monotonic() + busy_timeout_ms / 1000
        while True:
            try:
                self._open(busy_timeout_ms)
                return
            except sqlite3.OperationalError as exc:
                if "readonly" in str(exc) or (readonly and "unable to open" in str(exc)):
                    raise StateError(f"{self.path}: cannot open the state database ({exc}); "
                                     f"{READONLY_HINT}") from None
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
        if self.readonly:
            uri = f"file:{urllib.parse.quote(str(self.path))}?mode=ro"
            conn = sqlite3.connect(uri, uri=True, timeout=busy_timeout_ms / 1000,
                                   isolation_level=None)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # The file is made here with its mode, not by SQLite with the caller's umask
            # (SQLite gives its -journal, -wal and -shm files the database file's mode).
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, DB_FILE_MODE)
            except FileExistsError:
                pass
            else:
                os.fchmod(fd, DB_FILE_MODE)
                os.close(fd)
            conn = sqlite3.connect(str(self.path), timeout=busy_timeout_ms / 1000,
                                   isolation_level=None)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            if not self.readonly:
                self._set_journal(conn)
            conn.execute("PRAGMA foreign_keys = ON")
            self.db = sqlite_utils.Database(conn)
            if self.readonly:
                if MIGRATIONS.pending(self.db):
                    raise StateError(f"{self.path}: the state database is older than this "
                                     "arnold; an admin runs `arnold site init` to upgrade it")
            else:
                self._migrate()
        except BaseException:
            conn.close()
            raise

    def _set_journal(self, conn: sqlite3.Connection) -> None:
        """Switch to this database's journal mode unless it is in it already. Leaving WAL
        needs every other connection closed; while one is open the mode stays as it is (both
        keep every transaction whole) and the next opening switches it."""
        current = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
        if current == self.journal:
            return
        busy = conn.execute("PRAGMA busy_timeout").fetchone()[0]
        conn.execute("PRAGMA busy_timeout = 200")
        try:
            conn.execute(f"PRAGMA journal_mode = {self.journal.upper()}")
        except sqlite3.OperationalError as exc:
            if current != "wal" or "locked" not in str(exc):
                raise
            log.debug("%s: stays in WAL mode while another connection is open", self.path)
        finally:
            conn.execute(f"PRAGMA busy_timeout = {int(busy)}")

    @contextmanager
    def transaction(self) -> Iterator[sqlite_utils.Database]:
        """A write transaction that takes the write lock up front (``BEGIN IMMEDIATE``).

        A deferred transaction that reads and then writes can fail at once with "database is
        locked" when another process writes in between; taking the lock first makes concurrent
        writers wait their turn (up to the busy timeout) instead. sqlite-utils operations inside
        nest as savepoints.
        """
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if "readonly" in str(exc):
                raise StateError(f"{self.path}: cannot write ({exc}); {READONLY_HINT}") from None
            raise
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

    def abandon_unfinished(self) -> int:
        """Mark records still 'submitting' as 'abandoned'; how many. Call it only under the
        site-wide submit lock: a record is written and settled within one holding, so any
        still 'submitting' then belongs to a run that died (``kill -9``) in between."""
        with self.transaction():
            cursor = self.db.execute(
                "UPDATE jobs SET status = 'abandoned' WHERE status = 'submitting'")
            return int(cursor.rowcount)

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
