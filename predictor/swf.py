"""Job-history records and their readers: Standard Workload Format (SWF) and CSV.

SWF (the Parallel Workloads Archive format): 18 whitespace-separated fields per job; lines
starting with ``;`` are header comments; -1 means unknown. Fields used (1-based): 1 job id,
2 submit time, 3 wait time, 4 run time, 5 allocated processors, 8 requested processors,
9 requested time, 11 status, 12 user, 13 group, 14 executable, 15 queue, 16 partition.
Start = submit + wait; end = start + run time.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import zlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from slurm_arnold.errors import ArnoldError

FIELDS = ("job_id", "user", "group", "partition", "qos", "name", "submit", "start", "end",
          "nodes", "gpus", "procs", "time_limit", "state", "exit_code")


@dataclass(frozen=True)
class JobRecord:
    """One finished job, with only what a scheduler knows (times in epoch seconds)."""

    job_id: str
    user: str
    group: str
    partition: str
    qos: str
    name: str
    submit: int
    start: int | None
    end: int | None
    nodes: int | None
    gpus: int | None
    procs: int | None
    time_limit: int | None  # seconds
    state: str
    exit_code: int | None

    def as_row(self) -> dict[str, Any]:
        """A dict for the database."""
        return asdict(self)


@dataclass(frozen=True)
class BadLine:
    """A line that could not be read, and why."""

    line: int
    problem: str


SWF_STATUS = {"1": "COMPLETED", "0": "FAILED", "5": "CANCELLED", "2": "PARTIAL",
              "3": "PARTIAL", "4": "PARTIAL", "-1": "UNKNOWN"}


def _open_text(path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


def _number(value: str) -> float:
    """A finite number; ``nan``, ``inf`` and overflowing ones are malformed (ValueError)."""
    number = float(value)
    if not math.isfinite(number) or abs(number) > 1e15:
        raise ValueError(f"{value!r} is not a usable number")
    return number


def _known(value: str) -> int | None:
    number = int(_number(value))
    return None if number < 0 else number


def _checked(path: Path, items: Iterator[JobRecord | BadLine]) -> Iterator[JobRecord | BadLine]:
    """``items``, with a file that cannot be read (a ``.gz`` that is not gzip, a vanished
    file) or that holds no job record at all (empty, binary, every line bad) turned into one
    ``ArnoldError`` naming it: never an empty result."""
    records = bad = 0
    first_bad: BadLine | None = None
    try:
        for item in items:
            if isinstance(item, BadLine):
                bad += 1
                first_bad = first_bad or item
            else:
                records += 1
            yield item
    except (OSError, EOFError, zlib.error) as exc:
        raise ArnoldError(f"{path}: cannot read ({exc}); check the file") from None
    if records == 0:
        why = f"; {bad} unreadable lines, the first: line {first_bad.line}: " \
              f"{first_bad.problem}" if first_bad else ""
        raise ArnoldError(f"{path}: no job records in it{why}")


def read_swf(path: Path) -> Iterator[JobRecord | BadLine]:
    """Records of an SWF file (plain or .gz), and a ``BadLine`` for each unreadable line;
    ``ArnoldError`` for a file with no record in it or one that cannot be read."""
    return _checked(path, _read_swf(path))


def _read_swf(path: Path) -> Iterator[JobRecord | BadLine]:
    with _open_text(path) as fh:
        for number, raw in enumerate(fh, start=1):
            line = raw.strip()
            if not line or line.startswith(";"):
                continue
            fields = line.split()
            if len(fields) != 18:
                yield BadLine(number, f"{len(fields)} fields, SWF has 18")
                continue
            try:
                submit = _known(fields[1])
                wait, run = _known(fields[2]), _known(fields[3])
                alloc, req_procs = _known(fields[4]), _known(fields[7])
                req_time = _known(fields[8])
            except ValueError:
                yield BadLine(number, "a field is not a number")
                continue
            if submit is None:
                yield BadLine(number, "no submit time")
                continue
            start = submit + wait if wait is not None else None
            end = start + run if start is not None and run is not None else None
            yield JobRecord(
                job_id=fields[0], user=fields[11], group=fields[12], partition=fields[15],
                qos=fields[14], name=fields[13], submit=submit, start=start, end=end,
                nodes=None, gpus=None, procs=alloc if alloc is not None else req_procs,
                time_limit=req_time, state=SWF_STATUS.get(fields[10], "UNKNOWN"),
                exit_code=None)


def _time(value: str) -> int | None:
    value = value.strip()
    if not value:
        return None
    try:
        return int(_number(value))
    except ValueError:
        return int(datetime.fromisoformat(value).timestamp())


def _int(value: str) -> int | None:
    value = value.strip()
    return int(_number(value)) if value else None


def read_csv(path: Path) -> Iterator[JobRecord | BadLine]:
    """Records of a CSV with the header ``job_id, user, group, partition, qos, name, submit,
    start, end, nodes, gpus, procs, time_limit, state, exit_code`` (times as epoch seconds or
    ISO 8601, time_limit in seconds); ``ArnoldError`` for a file with no record in it."""
    return _checked(path, _read_csv(path))


def _read_csv(path: Path) -> Iterator[JobRecord | BadLine]:
    with _open_text(path) as fh:
        reader = csv.DictReader(fh)
        missing = [f for f in FIELDS if f not in (reader.fieldnames or [])]
        if missing:
            yield BadLine(1, f"header lacks {', '.join(missing)}")
            return
        for row in reader:
            number = reader.line_num
            try:
                submit = _time(row["submit"] or "")
                if submit is None:
                    yield BadLine(number, "no submit time")
                    continue
                yield JobRecord(
                    job_id=row["job_id"], user=row["user"], group=row["group"],
                    partition=row["partition"], qos=row["qos"], name=row["name"],
                    submit=submit, start=_time(row["start"] or ""), end=_time(row["end"] or ""),
                    nodes=_int(row["nodes"] or ""), gpus=_int(row["gpus"] or ""),
                    procs=_int(row["procs"] or ""), time_limit=_int(row["time_limit"] or ""),
                    state=row["state"], exit_code=_int(row["exit_code"] or ""))
            except (ValueError, TypeError, KeyError) as exc:
                yield BadLine(number, f"unreadable value ({exc})")
