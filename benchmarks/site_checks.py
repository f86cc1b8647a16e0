"""What ``arnold bench site`` checks after (and during) a run, read straight from Slurm's
commands (``squeue``, ``scontrol``, ``sacct``) and the SQLite files, never through the code
under test: the checks must not share its bugs."""

from __future__ import annotations

import math
import sqlite3
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import hostlist

from slurm_arnold.errors import ArnoldError

#: Our reservations' names: ``arnold_<job id of the large job>`` (a contract).
RESERVATION_PREFIX = "arnold_"


def _run(argv: Sequence[str]) -> str:
    proc = subprocess.run(list(argv), capture_output=True, text=True)
    if proc.returncode != 0:
        raise ArnoldError(f"{' '.join(argv[:3])}: {proc.stderr.strip() or 'failed'}")
    return proc.stdout


@dataclass(frozen=True)
class Queued:
    """One unfinished job as ``squeue`` shows it."""

    job_id: int
    name: str
    state: str
    reservation: str
    required: frozenset[str]
    nodes: frozenset[str]
    priority: int = 0
    submit: int = 0

    def order(self) -> tuple[int, int, int]:
        """Where it stands in Slurm's queue (``sort_job_queue2``, reservations aside): higher
        priority first, then earlier submits, then lower ids. Ids alone are not the order: a
        SIGKILLed slurmctld hands out again the ids it had not saved, to later jobs."""
        return (-self.priority, self.submit, self.job_id)


def queue() -> list[Queued]:
    """Every unfinished job (``squeue``)."""
    out = _run(["squeue", "-h", "-a", "-t", "all", "-o", "%i|%j|%T|%v|%n|%N|%Q|%V"])
    jobs = []
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) != 8 or not parts[0].isdigit():
            continue
        job_id, name, state, res, req, nodes, prio, submit = parts
        if state in ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                     "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"):
            continue
        jobs.append(Queued(int(job_id), name, state, "" if res in ("(null)", "") else res,
                           _hosts(req), _hosts(nodes), int(prio) if prio.isdigit() else 0,
                           _epoch(submit) or 0))
    return jobs


def reservations() -> dict[str, frozenset[str]]:
    """Every reservation's nodes (``scontrol show reservation -o``)."""
    out = subprocess.run(["scontrol", "show", "reservation", "-o"], capture_output=True,
                         text=True)
    if out.returncode != 0 and "No reservations" not in out.stdout + out.stderr:
        raise ArnoldError(f"scontrol show reservation: {out.stderr.strip()}")
    found: dict[str, frozenset[str]] = {}
    for line in out.stdout.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "ReservationName" in fields:
            found[fields["ReservationName"]] = _hosts(fields.get("Nodes", ""))
    return found


def _hosts(text: str) -> frozenset[str]:
    text = text.strip()
    if not text or text in ("(null)", "None assigned", "(None)"):
        return frozenset()
    return frozenset(hostlist.expand_hostlist(text))


@dataclass(frozen=True)
class Finished:
    """One job of the run as ``sacct`` shows it (times in epoch seconds)."""

    job_id: int
    name: str
    user: str
    state: str
    submit: int
    start: int | None
    end: int | None
    nodes: tuple[str, ...]


def accounting(since: int, prefix: str) -> list[Finished]:
    """Every job named ``prefix...`` submitted since ``since`` (``sacct``, allocations only)."""
    out = _run(["sacct", "-a", "-X", "-n", "-P", "-S", _iso(since), "-E", "now",
                "--format=JobIDRaw,JobName%200,User,State,Submit,Start,End,NodeList%10000"])
    jobs = []
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) != 8 or not parts[0].isdigit() or not parts[1].startswith(prefix):
            continue
        job_id, name, user, state, submit, start, end, nodes = parts
        jobs.append(Finished(int(job_id), name, user, state.split()[0], _epoch(submit) or 0,
                             _epoch(start), _epoch(end),
                             tuple(sorted(_hosts(nodes))) if _epoch(start) else ()))
    return jobs


def _iso(epoch: int) -> str:
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))


def _epoch(text: str) -> int | None:
    import time

    if not text or text in ("Unknown", "None"):
        return None
    try:
        return int(time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None


@dataclass
class Findings:
    """What the checks saw: each list names the offenders (empty: the rule held)."""

    orphan_reservations: list[str] = field(default_factory=list)
    bound_outside: list[str] = field(default_factory=list)
    shared_nodes: list[str] = field(default_factory=list)
    corrupt_databases: list[str] = field(default_factory=list)
    unsettled_records: list[str] = field(default_factory=list)
    waiting_on_missing: list[str] = field(default_factory=list)
    snapshots: int = 0
    #: What the previous snapshot saw: a state the loop leaves for one pass (an LPJ ended
    #: after the pass read the queue) is the next pass's to mend; seen twice, it was not.
    _seen: set[str] = field(default_factory=set)
    _now: set[str] = field(default_factory=set)

    def rules(self) -> dict[str, list[str]]:
        """Rule -> offenders, in the order the bench reports them."""
        return {
            "no reservation of ours without its large job": self.orphan_reservations,
            "no job bound to nodes it may not use": self.bound_outside,
            "no two jobs given the same nodes": self.shared_nodes,
            "every database passes PRAGMA integrity_check": self.corrupt_databases,
            "every record settled or explained": self.unsettled_records,
            "no large job waiting on a reservation that no longer exists":
                self.waiting_on_missing,
        }

    def held(self) -> bool:
        """Whether every rule held."""
        return not any(self.rules().values())


def snapshot(findings: Findings, prefix: str) -> None:
    """The rules that can only be seen while jobs wait: read the queue and the reservations
    once (after a pass of the admin loop) and add what breaks them and broke them at the
    previous snapshot too (jobs of this run only, named ``prefix...``)."""
    jobs = queue()
    res = reservations()
    findings.snapshots += 1
    findings._seen, findings._now = findings._now, set()
    unfinished = {j.job_id for j in jobs}
    by_id = {j.job_id: j for j in jobs}
    for name in res:
        if not name.startswith(RESERVATION_PREFIX):
            continue
        owner = name[len(RESERVATION_PREFIX):]
        # Slurm deletes no reservation that jobs still run in: one whose large job is gone
        # lives on (shrunk to them) until the jobs admitted into it end.
        serving = any(j.reservation == name and j.state != "PENDING" for j in jobs)
        if (not owner.isdigit() or int(owner) not in unfinished) and not serving:
            _add(findings.orphan_reservations, f"{name} (job {owner} is not in the queue)",
                 findings)
    for job in jobs:
        if not job.name.startswith(prefix):
            continue
        if job.state == "PENDING" and job.reservation.startswith(RESERVATION_PREFIX) \
                and job.reservation not in res:
            _add(findings.waiting_on_missing,
                 f"job {job.job_id} waits on {job.reservation}, which is gone", findings)
        if job.state == "PENDING" and job.required:
            # A bound job may wait for nodes reserved for a large job ahead of it or running
            # there (they are its next, as Slurm's own plan would have them), never for those
            # held for one behind it: that reservation would hold it back. (A reservation
            # whose large job is gone is the first rule's.)
            own = f"{RESERVATION_PREFIX}{job.job_id}"
            for name, nodes in res.items():
                if name in (job.reservation, own) or not name.startswith(RESERVATION_PREFIX) \
                        or not job.required & nodes:
                    continue
                lpj = by_id.get(int(name[len(RESERVATION_PREFIX):] or 0)) \
                    if name[len(RESERVATION_PREFIX):].isdigit() else None
                if lpj is None or lpj.state != "PENDING" or lpj.order() < job.order():
                    continue
                taken = hostlist.collect_hostlist(sorted(job.required & nodes))
                _add(findings.bound_outside, f"job {job.job_id} bound to {taken} of {name} "
                     "(its large job waits behind it)", findings)


def _add(found: list[str], what: str, findings: Findings | None = None) -> None:
    if findings is not None:
        findings._now.add(what)
        if what not in findings._seen:
            return  # first seen now: the next pass may mend it
    if what not in found:
        found.append(what)


def shared_nodes(jobs: Iterable[Finished], kills: Sequence[float] = ()) -> list[str]:
    """Pairs of jobs that held one node at the same time (their allocations are whole nodes;
    sacct's times are whole seconds, so touching ends do not count).

    ``kills``: when slurmctld was SIGKILLed (epoch seconds). A job that started before a kill
    and was recorded as ending after it has no end we can trust: one that ended between
    slurmctld's last state save and the kill is given its end by the restarted slurmctld, at
    its recovery (or at a later request on its id), while the live slurmctld had already given
    its nodes to the next job (seen in CI: a job that ran 1 s recorded for 19 s). So a job the
    live slurmctld started on its nodes before the kill does not count against it (Slurm gives
    out no node it holds), and it ends at the kill for every job after: one the restarted
    slurmctld recovers as running keeps its nodes, and one whose start it lost is Slurm's
    loss, not ours (docs/site.md, "When daemons fail")."""
    by_node: dict[str, list[tuple[int, int, int, bool]]] = {}
    for job in jobs:
        if job.start is None or not job.nodes:
            continue
        end = job.end if job.end is not None else 2**62
        lost_end = False
        for kill in kills:
            if job.start <= kill < end:
                end, lost_end = math.floor(kill), True
        for node in job.nodes:
            by_node.setdefault(node, []).append((job.start, end, job.job_id, lost_end))
    found: list[str] = []
    for node, spans in by_node.items():
        spans.sort()
        last_end, last_job, last_lost = -1, 0, False
        for start, end, job_id, lost_end in spans:
            if start < last_end and not last_lost:
                _add(found, f"jobs {last_job} and {job_id} both on {node}")
            if end > last_end:
                last_end, last_job, last_lost = end, job_id, lost_end
    return found


def integrity(paths: Iterable[Path]) -> list[str]:
    """Databases whose ``PRAGMA integrity_check`` is not ``ok`` (or that do not open)."""
    bad = []
    for path in paths:
        try:
            con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
            try:
                answer = [row[0] for row in con.execute("PRAGMA integrity_check")]
            finally:
                con.close()
        except sqlite3.Error as exc:
            bad.append(f"{path.name}: {exc}")
            continue
        if answer != ["ok"]:
            bad.append(f"{path.name}: {'; '.join(answer[:3])}")
    return bad


def databases(*roots: Path) -> list[Path]:
    """Every SQLite database under ``roots`` (by its file header)."""
    found = []
    for root in roots:
        if not root.exists():
            continue
        for path in sorted(root.rglob("*")):
            try:
                if path.is_file() and path.stat().st_size >= 100:
                    with path.open("rb") as f:
                        if f.read(16) == b"SQLite format 3\x00":
                            found.append(path)
            except OSError:
                continue
    return found


#: Reservation rows that are done with, and jobs rows arnold-sbatch finished.
SETTLED_RESERVATIONS = ("released",)
SETTLED_SUBMISSIONS = ("queued", "submitted", "sbatch-failed", "abandoned")


def unsettled(site_db: Path | None, user_dbs: Iterable[Path], live: set[str]) -> list[str]:
    """Records neither settled nor explained: a reservation row still active with no such
    reservation in Slurm (or released without a reason), an arnold-sbatch record left
    half-written (``submitting``)."""
    found: list[str] = []
    if site_db is not None and site_db.exists():
        con = sqlite3.connect(f"file:{site_db}?mode=ro", uri=True, timeout=30)
        try:
            tables = {r[0] for r in con.execute("select name from sqlite_master")}
            if "reservations" in tables:
                for name, state, reason in con.execute(
                        "select name, state, release_reason from reservations"):
                    if state in SETTLED_RESERVATIONS and not reason:
                        found.append(f"reservation {name}: released without a reason")
                    elif state not in SETTLED_RESERVATIONS and name not in live:
                        found.append(f"reservation {name}: {state} in the database, not in "
                                     "Slurm")
        finally:
            con.close()
    for path in user_dbs:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
        try:
            tables = {r[0] for r in con.execute("select name from sqlite_master")}
            if "jobs" not in tables:
                continue
            for row_id, job_id, status in con.execute(
                    "select id, slurm_job_id, status from jobs"):
                if status not in SETTLED_SUBMISSIONS:
                    found.append(f"{path.parent.name}: submission {row_id} (job {job_id}) "
                                 f"left {status}")
        finally:
            con.close()
    return found
