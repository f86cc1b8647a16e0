"""The state databases: SQLite files owned by this module, migrated by sqlite-utils.

Two of them (``slurm_arnold.site_state`` says where and why): the site's, written by the admin
side and read by every user, and each user's own, written by that user's arnold-sbatch. Both
have the same schema, whose steps (``slurm_arnold.migrations``) are applied in order, each in
its own transaction, when a writer opens the file. arnold-sbatch's path uses plain sqlite3;
``StateDB.db`` gives sqlite-utils' API to the admin side.

Journal mode: both use SQLite's rollback journal (``DELETE``), never WAL. WAL keeps its index
in shared memory (the ``-shm`` file, mapped by every connection), which works only where every
process that opens the file runs on one host: users' databases live in ``jobs_dir``, on a file
system that login nodes, the admin side and compute nodes share (the rank files must be seen
there), so WAL there would corrupt them across hosts; and SQLite cannot open a WAL database
read-only from a directory the reader may not write, which is how users read the site's. Each
file has one writer at a time (a user's arnold-sbatch, the admin side's short passes), so
WAL's concurrency would buy little. A database found in WAL (made by an earlier version) is
switched on its next opening for writing.
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from slurm_arnold.errors import StateError
from slurm_arnold.migrations import JOBS_COLUMNS, MIGRATION_SET, STEPS, migrations

if TYPE_CHECKING:
    import sqlite_utils

#: sqlite-utils' table of applied migration steps (``Migrations.migrations_table``).
MIGRATIONS_TABLE = "_sqlite_migrations"
log = logging.getLogger(__name__)


#: Mode of every database file we create (the -journal/-wal/-shm files follow it).
DB_FILE_MODE = 0o644
READONLY_HINT = ("it is written by the admin side only (`arnold reserve sync`, `arnold "
                 "predictor retrain`, `arnold site init`)")


#: What a writer says when the state's file system is full (SQLite rolled the write back).
FULL_HINT = ("the file system is full, nothing of this write was kept; free space there "
             "(`df` names it) and run again")


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's or the system's "no space left" (SQLITE_FULL, ENOSPC)."""
    if isinstance(exc, OSError):
        return exc.errno == errno.ENOSPC
    return isinstance(exc, sqlite3.OperationalError) and "disk is full" in str(exc)


class StateDB:
    """The project's SQLite state (busy timeout, migrations applied on open by writers).

    ``journal`` is ``delete`` (every database of the product, see the module) or ``wal``
    (only for a file no other host will ever open). Raises ``StateError`` when the file
    cannot be opened, is not a database, or a read-only caller finds its schema older than
    this program's.
    """

    def __init__(self, path: Path | str, *, busy_timeout_ms: int = 30_000,
                 journal: Literal["wal", "delete"] = "delete", readonly: bool = False) -> None:
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
            self.conn = conn
            if self.readonly:
                if self._pending():
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

    @cached_property
    def db(self) -> sqlite_utils.Database:
        """The connection as a sqlite-utils ``Database`` (made on first use: see
        ``slurm_arnold.migrations`` for why arnold-sbatch's path never needs it)."""
        import sqlite_utils

        return sqlite_utils.Database(self.conn)

    @contextmanager
    def _immediate(self) -> Iterator[sqlite3.Connection]:
        """A write transaction that takes the write lock up front (``BEGIN IMMEDIATE``)."""
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if "readonly" in str(exc):
                raise StateError(f"{self.path}: cannot write ({exc}); {READONLY_HINT}") from None
            raise
        try:
            yield self.conn
            self.conn.execute("COMMIT")
        except BaseException as exc:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            if is_disk_full(exc):
                raise StateError(f"{self.path}: {FULL_HINT}") from None
            raise

    @contextmanager
    def transaction(self) -> Iterator[sqlite_utils.Database]:
        """A write transaction that takes the write lock up front (``BEGIN IMMEDIATE``).

        A deferred transaction that reads and then writes can fail at once with "database is
        locked" when another process writes in between; taking the lock first makes concurrent
        writers wait their turn (up to the busy timeout) instead. sqlite-utils operations inside
        nest as savepoints.
        """
        with self._immediate():
            yield self.db

    def _applied_names(self) -> list[str]:
        exists = self.conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND "
                                   "name = ?", [MIGRATIONS_TABLE]).fetchone()
        if not exists:
            return []
        rows = self.conn.execute(f"SELECT name FROM [{MIGRATIONS_TABLE}] WHERE migration_set = ?"
                                 " ORDER BY rowid", [MIGRATION_SET])
        return [str(name) for (name,) in rows]

    def _pending(self) -> bool:
        return bool({name for name, _ in STEPS} - set(self._applied_names()))

    def _migrate(self) -> None:
        # Pending migrations are checked and applied under the write lock, so two processes
        # opening a new database at once never both apply one.
        if not self._pending():
            return
        with self.transaction() as db:
            migrations().apply(db)

    def applied_migrations(self) -> list[str]:
        """Names of the migrations applied to this database, in order."""
        return self._applied_names()

    def integrity_ok(self) -> bool:
        """Whether ``PRAGMA integrity_check`` reports ``ok``."""
        row = self.conn.execute("PRAGMA integrity_check").fetchone()
        return bool(row and row[0] == "ok")

    def journal_mode(self) -> str:
        """The journal mode in force (``delete``)."""
        return str(self.conn.execute("PRAGMA journal_mode").fetchone()[0])

    def record_job(self, record: dict[str, Any]) -> int:
        """Insert a job record; return its id."""
        row = dict(record, created_at=record.get("created_at", time.time()))
        unknown = set(row) - set(JOBS_COLUMNS)
        if unknown:
            raise ValueError(f"not columns of jobs: {sorted(unknown)}")
        names = ", ".join(f"[{name}]" for name in row)
        marks = ", ".join("?" for _ in row)
        with self._immediate() as conn:
            cursor = conn.execute(f"INSERT INTO jobs ({names}) VALUES ({marks})",
                                  list(row.values()))
            return int(cursor.lastrowid or 0)

    def update_job(self, record_id: int, fields: dict[str, Any]) -> None:
        """Change some columns of one job record."""
        unknown = set(fields) - set(JOBS_COLUMNS)
        if unknown:
            raise ValueError(f"not columns of jobs: {sorted(unknown)}")
        sets = ", ".join(f"[{name}] = ?" for name in fields)
        with self._immediate() as conn:
            conn.execute(f"UPDATE jobs SET {sets} WHERE id = ?", [*fields.values(), record_id])

    def job_record(self, record_id: int) -> dict[str, Any] | None:
        """One job record by its id, or None."""
        rows = self._job_rows("id = ?", [record_id], limit=1)
        return rows[0] if rows else None

    def abandon_unfinished(self) -> int:
        """Mark records still 'submitting' as 'abandoned'; how many. Call it only under the
        site-wide submit lock: a record is written and settled within one holding, so any
        still 'submitting' then belongs to a run that died (``kill -9``) in between."""
        with self._immediate() as conn:
            cursor = conn.execute(
                "UPDATE jobs SET status = 'abandoned' WHERE status = 'submitting'")
            return int(cursor.rowcount)

    def jobs(self, limit: int = 100) -> list[dict[str, Any]]:
        """The most recent job records, newest first."""
        return self._job_rows("1", [], limit=limit)

    def job(self, slurm_job_id: int) -> dict[str, Any] | None:
        """The latest record of a Slurm job submitted through arnold-sbatch, or None."""
        rows = self._job_rows("slurm_job_id = ?", [slurm_job_id], limit=1)
        return rows[0] if rows else None

    def _job_rows(self, where: str, args: list[Any], *, limit: int) -> list[dict[str, Any]]:
        cursor = self.conn.execute(f"SELECT * FROM jobs WHERE {where} ORDER BY id DESC "
                                   "LIMIT ?", [*args, limit])
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor]

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()
