"""The finished-job history in the state database, and its importers (SWF, CSV, sacct)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from predictor.swf import FIELDS, BadLine, JobRecord
from slurm_arnold.slurm import UNFINISHED, Slurm
from slurm_arnold.state import StateDB


@dataclass
class ImportReport:
    """What an import did: new rows, rows already known, and every bad line."""

    added: int = 0
    known: int = 0
    bad: list[BadLine] = field(default_factory=list)

    def summary(self) -> str:
        """One line for the user."""
        text = f"imported {self.added} new jobs ({self.known} already known"
        if self.bad:
            shown = "; ".join(f"line {b.line}: {b.problem}" for b in self.bad[:5])
            more = f" and {len(self.bad) - 5} more" if len(self.bad) > 5 else ""
            text += f", {len(self.bad)} bad lines: {shown}{more}"
        return text + ")"


def import_records(state: StateDB, source: str, items: Iterable[JobRecord | BadLine],
                   progress: Callable[[int], None] | None = None,
                   batch: int = 5000) -> ImportReport:
    """Insert records that are not there yet (idempotent), in transactions of ``batch``."""
    report = ImportReport()
    rows: list[dict[str, object]] = []

    def flush() -> None:
        if not rows:
            return
        with state.transaction():
            before = state.db.execute("select count(*) from history").fetchone()[0]
            state.db.table("history").insert_all(rows, ignore=True)
            after = state.db.execute("select count(*) from history").fetchone()[0]
        report.added += after - before
        report.known += len(rows) - (after - before)
        if progress:
            progress(len(rows))
        rows.clear()

    for item in items:
        if isinstance(item, BadLine):
            report.bad.append(item)
            continue
        rows.append(item.as_row() | {"source": source})
        if len(rows) >= batch:
            flush()
    flush()
    return report


def sacct_records(slurm: Slurm, since: str | None) -> list[JobRecord]:
    """Finished jobs from the live cluster's accounting."""
    out = []
    for r in slurm.accounting(since=since):
        if r.end is None or r.state in UNFINISHED:
            continue
        if not r.settled or (r.start is not None and r.node_count == 0):
            # A record slurmdbd has not filled in yet; importing it would freeze it (imports
            # are idempotent). The next run takes it.
            continue
        out.append(JobRecord(
            job_id=str(r.job_id), user=r.user, group=r.group, partition=r.partition,
            qos=r.qos, name=r.name, submit=r.submit or r.start or r.end, start=r.start,
            end=r.end, nodes=r.node_count, gpus=r.gpus, procs=None,
            time_limit=r.time_limit_min * 60 if r.time_limit_min else None, state=r.state,
            exit_code=r.exit_code))
    return out


def load_history(state: StateDB, user: str | None = None) -> list[JobRecord]:
    """Every imported job (or one user's), in submit order."""
    where, args = ("user = ?", [user]) if user is not None else (None, [])
    return [JobRecord(**{k: row[k] for k in FIELDS})
            for row in state.db.table("history").rows_where(where, args, order_by="submit")]
