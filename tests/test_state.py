"""The SQLite state database: its journal, migrations, concurrency, corrupt files."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

import pytest

from slurm_arnold.errors import StateError
from slurm_arnold.state import StateDB

ALL_MIGRATIONS = ["0001_jobs", "0002_history", "0003_reservations", "0004_bindings",
                  "0005_reservation_idle", "0006_prolog_runs"]


def test_new_database_has_a_rollback_journal_and_is_migrated(tmp_path: Path) -> None:
    db = StateDB(tmp_path / "sub" / "arnold.db")
    assert db.journal_mode() == "delete"
    assert db.applied_migrations() == ALL_MIGRATIONS
    job = db.record_job({"user": "alice", "slurm_job_id": 42, "status": "submitted"})
    db.close()
    again = StateDB(tmp_path / "sub" / "arnold.db")  # reopening applies nothing twice
    assert again.applied_migrations() == ALL_MIGRATIONS
    assert [r["id"] for r in again.jobs()] == [job]
    assert again.integrity_ok()


def _open_and_insert(path: str, n: int) -> None:
    db = StateDB(path)
    for i in range(n):
        db.record_job({"user": "u", "slurm_job_id": i})
    db.close()


def test_concurrent_processes_open_and_write(tmp_path: Path) -> None:
    path = str(tmp_path / "arnold.db")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_open_and_insert, args=(path, 25)) for _ in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    db = StateDB(path)
    assert len(db.jobs(limit=1000)) == 150
    assert db.applied_migrations() == ALL_MIGRATIONS
    assert db.integrity_ok()


def test_corrupt_file_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "arnold.db"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StateError, match=r"cannot open the state database.*move it aside"):
        StateDB(bad)
    assert bad.read_bytes().startswith(b"this is not sqlite")  # nothing overwritten


def test_unwritable_directory_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StateError, match="state_dir"):
        StateDB(blocker / "sub" / "arnold.db")


def test_plain_sqlite_view_of_migrations_agrees_with_sqlite_utils(tmp_path: Path) -> None:
    from slurm_arnold.migrations import migrations

    db = StateDB(tmp_path / "arnold.db")
    assert [m.name for m in migrations().applied(db.db)] == db.applied_migrations()
    assert not migrations().pending(db.db)
    # A database one step behind is brought up to date on the next writer's open.
    db.conn.execute("DELETE FROM _sqlite_migrations WHERE name = '0004_bindings'")
    db.conn.execute("DROP TABLE bindings")
    db.close()
    again = StateDB(tmp_path / "arnold.db")
    assert again.applied_migrations()[-1] == "0004_bindings"
    assert "bindings" in again.db.table_names()


def test_job_records_round_trip_and_reject_unknown_columns(tmp_path: Path) -> None:
    db = StateDB(tmp_path / "arnold.db")
    first = db.record_job({"user": "alice", "slurm_job_id": None, "status": "submitting"})
    db.update_job(first, {"slurm_job_id": 7, "status": "submitted"})
    record = db.job_record(first)
    assert record is not None and (record["slurm_job_id"], record["status"]) == (7, "submitted")
    assert db.job(7) == record
    assert db.job_record(first + 100) is None
    with pytest.raises(ValueError, match="not columns of jobs"):
        db.record_job({"user": "alice", "owner; DROP TABLE jobs": 1})
    with pytest.raises(ValueError, match="not columns of jobs"):
        db.update_job(first, {"nope": 1})
    assert db.job(7) == record


def test_arnold_sbatch_starts_without_numpy_or_sqlite_utils() -> None:
    # Every user pays arnold-sbatch's start-up time; numpy (pulled in by sqlite-utils) alone
    # doubled its CPU and made 15 concurrent submissions miss the latency target.
    import subprocess
    import sys

    code = ("import sys, slurm_arnold.cli.sbatch; "
            "print(sorted(m for m in ('numpy', 'sqlite_utils', 'pyscipopt', 'lightgbm') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def test_a_database_from_before_idle_accounting_gains_its_columns(tmp_path: Path) -> None:
    db = StateDB(tmp_path / "arnold.db")
    db.db.table("reservations").insert({"name": "arnold_7", "lpj_job_id": 7, "state": "active"})
    # As the previous release left it: no idle columns, the step not applied.
    db.conn.execute("DELETE FROM _sqlite_migrations WHERE name = '0005_reservation_idle'")
    for column in ("idle_node_s", "idle_nodes", "idle_checked_at"):
        db.conn.execute(f"ALTER TABLE reservations DROP COLUMN {column}")
    db.close()
    again = StateDB(tmp_path / "arnold.db")
    row = again.db.table("reservations").get("arnold_7")
    assert row["idle_node_s"] == 0.0 and row["idle_nodes"] is None and row["lpj_job_id"] == 7


def test_a_database_from_before_prolog_timing_gains_its_table(tmp_path: Path) -> None:
    db = StateDB(tmp_path / "arnold.db")
    db.db.table("bindings").insert({"job_id": 9, "kind": "start", "reason": "mapped"})
    db.conn.execute("DELETE FROM _sqlite_migrations WHERE name = '0006_prolog_runs'")
    db.conn.execute("DROP TABLE prolog_runs")
    db.close()
    again = StateDB(tmp_path / "arnold.db")
    assert "prolog_runs" in again.db.table_names()
    assert next(again.db.table("bindings").rows)["job_id"] == 9


def test_a_wal_database_of_an_earlier_version_leaves_wal_on_opening(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "arnold.db"
    old = sqlite3.connect(path)
    assert old.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal"
    old.close()
    db = StateDB(path)
    assert db.journal_mode() == "delete" and db.applied_migrations() == ALL_MIGRATIONS
    db.record_job({"user": "u", "slurm_job_id": 1})
    db.close()
    assert not list(tmp_path.glob("arnold.db-*"))  # no -wal, -shm or hot journal left


def test_no_wal_database_is_made_under_jobs_dir(tmp_path: Path) -> None:
    """Users' databases live in jobs_dir, which login nodes and compute nodes share: WAL's
    shared-memory index would break there (docs/site.md, several login nodes)."""
    from site_config import SiteConfig
    from slurm_arnold.site_state import caller as me
    from slurm_arnold.site_state import open_user_db, user_db_path

    config = SiteConfig(state_dir=tmp_path / "state", jobs_dir=tmp_path / "shared" / "jobs")
    db = open_user_db(config)
    db.record_job({"user": me(), "slurm_job_id": 7, "status": "submitted"})
    reader = StateDB(user_db_path(config, me()), readonly=True)  # as the admin side reads it
    assert [r["slurm_job_id"] for r in reader.jobs()] == [7]
    assert db.journal_mode() == reader.journal_mode() == "delete"
    made = [p.name for p in (tmp_path / "shared").rglob("*")]
    assert not [n for n in made if n.endswith(("-wal", "-shm"))], made
    reader.close()
    db.close()


def test_a_full_disk_is_one_line_and_keeps_what_was_written(tmp_path: Path) -> None:
    # SQLite's max_page_count gives the same SQLITE_FULL a full file system does, without one.
    db = StateDB(tmp_path / "arnold.db")
    kept = db.record_job({"user": "u", "slurm_job_id": 1, "status": "submitted"})
    pages = db.conn.execute("PRAGMA page_count").fetchone()[0]
    db.conn.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(StateError, match="the file system is full, nothing of this write") as err:
        for i in range(2, 10_000):
            db.record_job({"user": "u", "slurm_job_id": i, "status": "x" * 4000})
    assert "\n" not in str(err.value)
    assert not db.conn.in_transaction
    assert db.job_record(kept)["status"] == "submitted"  # type: ignore[index]
    assert db.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_a_full_disk_outside_a_transaction_is_not_called_a_bug() -> None:
    from slurm_arnold.cli.errors import unexpected

    line = unexpected(sqlite3.OperationalError("database or disk is full"))
    assert "file system is full" in line and "bug" not in line
    assert "bug" in unexpected(sqlite3.OperationalError("no such table: x"))
