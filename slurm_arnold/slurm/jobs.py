"""Jobs in slurmctld's queue: ``squeue --json`` (v0.0.38's plain numbers and state word, or
v0.0.42 to v0.0.45's wrapped numbers and state lists) and ``squeue --Format`` text, which also
serves the queries ``--json`` cannot filter."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import hostlist

from slurm_arnold.errors import SlurmOutputError
from slurm_arnold.slurm.common import job_state, number, parse_duration_min, parse_time
from slurm_arnold.slurm.runner import Runner


@dataclass(frozen=True)
class JobInfo:
    """One job in slurmctld's queue."""

    job_id: int
    name: str
    user: str
    state: str
    nodes: tuple[str, ...]
    partition: str
    time_limit_min: int | None
    start_time: int | None
    end_time: int | None
    reservation: str | None
    node_count: int = 0  # nodes asked for (pending) or held (running)
    gpus: int = 0  # GPUs of the whole job
    submit_time: int | None = None
    required_nodes: tuple[str, ...] = ()  # -w / ReqNodeList
    reason: str = ""  # why it pends (Resources, Priority, JobHeldAdmin, ...)
    priority: int = 0
    #: -x / ExcNodeList and -C / Features: from ``squeue --json`` only (22.05's ``--Format``
    #: has no field for excluded nodes), so empty in ``jobs(unfinished=True)``.
    excluded_nodes: tuple[str, ...] = ()
    features: str = ""

    @property
    def held(self) -> bool:
        """Held: by a user or an admin (``scontrol hold``), or by Slurm itself (a job whose
        launch failed is requeued held: ``launch failed requeued held``)."""
        return "held" in self.reason.lower()


def gpus_in_tres(text: str | None) -> int:
    """GPUs in a TRES string such as ``cpu=4,node=4,gres/gpu=32``.

    Where typed GPUs are tracked too (``gres/gpu=8,gres/gpu:a100=8``) the untyped count is
    their total already; typed counts are summed only when it is absent.
    """
    untyped = re.search(r"(?:^|,)gres/gpu=(\d+)", text or "")
    if untyped:
        return int(untyped.group(1))
    return sum(int(m.group(1)) for m in
               re.finditer(r"(?:^|,)gres/gpu:[\w.-]+=(\d+)", text or ""))


def jobs_from_json(doc: Mapping[str, Any]) -> list[JobInfo]:
    """``squeue --json``: v0.0.38's plain numbers and state word, or v0.0.42 to v0.0.45's
    ``{set, infinite, number}`` numbers and state lists (``number``, ``job_state``)."""
    out = []
    for j in doc["jobs"]:
        nodes = j.get("nodes") or ""
        required = j.get("required_nodes") or ""
        excluded = j.get("excluded_nodes") or ""
        out.append(JobInfo(
            job_id=int(j["job_id"]),
            name=j.get("name") or "",
            user=j.get("user_name") or str(j.get("user_id", "")),
            state=job_state(j.get("job_state")),
            nodes=tuple(hostlist.expand_hostlist(nodes)) if nodes else (),
            partition=j.get("partition") or "",
            time_limit_min=number(j.get("time_limit")),
            start_time=number(j.get("start_time")) or None,
            end_time=number(j.get("end_time")) or None,
            # v0.0.38 names it resv_name too ("reservation" is not in the object)
            reservation=j.get("resv_name") or None,
            node_count=number(j.get("node_count")) or 0,
            gpus=gpus_in_tres(j.get("tres_alloc_str") or j.get("tres_req_str")),
            submit_time=number(j.get("submit_time")) or None,
            required_nodes=tuple(hostlist.expand_hostlist(required)) if required else (),
            reason=str(j.get("state_reason") or ""),
            priority=number(j.get("priority")) or 0,
            excluded_nodes=tuple(hostlist.expand_hostlist(excluded)) if excluded else (),
            features=str(j.get("features") or ""),
        ))
    return out


# Name comes last: it is the one field a user chooses freely (it may hold "|"), so a line is
# split into exactly as many fields as there are, the rest of it being the name.
SQUEUE_FIELDS = ["JobID", "UserName", "State", "NodeList", "Partition", "TimeLimit",
                  "StartTime", "EndTime", "Reservation", "NumNodes", "tres-alloc",
                  "SubmitTime", "ReqNodes", "Reason", "PriorityLong", "Name"]
SQUEUE_FORMAT = ",".join(f"{name}:|" for name in SQUEUE_FIELDS)
#: Every state of a job that is not finished (what ``taken_by_queue`` must see).
SQUEUE_UNFINISHED = "PENDING,RUNNING,SUSPENDED,COMPLETING,CONFIGURING,RESIZING,REQUEUED," \
    "REQUEUE_FED,REQUEUE_HOLD,SIGNALING,STAGE_OUT,STOPPED,RESV_DEL_HOLD,SPECIAL_EXIT"
UNFINISHED = frozenset(SQUEUE_UNFINISHED.split(","))


def jobs_from_squeue_text(text: str) -> list[JobInfo]:
    """Jobs from ``squeue --noheader --Format`` with ``SQUEUE_FIELDS``, each ended by "|"."""
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        f = line.removesuffix("|").split("|", len(SQUEUE_FIELDS) - 1)
        if len(f) != len(SQUEUE_FIELDS) or not f[0].strip().isdigit():
            raise SlurmOutputError(f"squeue: unexpected line {line!r}")
        f = [field.strip() for field in f[:-1]] + [f[-1]]
        nodes, required = f[3], f[12]
        out.append(JobInfo(
            job_id=int(f[0]), name=f[15], user=f[1], state=f[2].upper(),
            nodes=tuple(hostlist.expand_hostlist(nodes)) if nodes and nodes != "(null)" else (),
            partition=f[4], time_limit_min=parse_duration_min(f[5]),
            start_time=parse_time(f[6]), end_time=parse_time(f[7]),
            reservation=f[8] if f[8] not in ("", "(null)") else None,
            node_count=int(f[9]) if f[9].isdigit() else 0,
            gpus=gpus_in_tres(f[10]),
            submit_time=parse_time(f[11]),
            required_nodes=tuple(hostlist.expand_hostlist(required))
            if required and required != "(null)" else (),
            reason=reason_of(f[13]),
            priority=int(f[14]) if f[14].isdigit() else 0,
        ))
    return out




def reason_of(text: str) -> str:
    """The reason Slurm records, from squeue's text, which prints the description slurmctld
    gave in its place ("ReqNodeNotAvail, UnavailableNodes:n[001-016]"): the JSON's reason is
    the word before the comma. Reasons that are phrases ("launch failed requeued held") stay
    whole."""
    head, comma, _ = text.partition(", ")
    return head if comma and head and " " not in head else text


def read_jobs(runner: Runner, *, unfinished: bool = False,
              detail: bool = False) -> list[JobInfo]:
    """Every job slurmctld still knows, or with ``unfinished`` only those not finished;
    ``detail`` adds each job's -x and -C.

    Every job is read as JSON. Unfinished ones are read as text filtered by state (JSON costs
    a few kilobytes a job, paid inside the site lock); with ``detail``, as JSON filtered by
    state where squeue filters its JSON (24.11 on), else (22.05, whose JSON ignores every
    filter and lists each finished job slurmctld keeps: 28 MB and 5 s on a 2,048-node cluster
    where the text takes 0.03 s) as text with a second, narrow read for -x and -C
    (``--Format`` has no field for excluded nodes; the old ``-o %x`` has).
    """
    if not unfinished:
        # 22.05's --json ignores filters and lists every job; later ones apply squeue's
        # default (unfinished jobs of visible partitions) unless told otherwise.
        doc = runner.json_doc(["squeue"] if runner.json_family == "v0.0.38"
                              else ["squeue", "--all", "--states=all"])
        if doc is not None:
            return jobs_from_json(doc)
    elif detail and runner.json_family not in (None, "v0.0.38"):
        # Where squeue filters its JSON (24.11 on), the JSON of the unfinished jobs: the
        # reasons there are Slurm's own, where the text prints descriptions.
        doc = runner.json_doc(["squeue", "--all", f"--states={SQUEUE_UNFINISHED}"])
        if doc is not None:
            return [j for j in jobs_from_json(doc) if j.state in UNFINISHED]
    states = SQUEUE_UNFINISHED if unfinished else "all"
    out = runner.run(["squeue", "--all", "--noheader", f"--states={states}", "--Format",
                      SQUEUE_FORMAT]).stdout
    jobs = jobs_from_squeue_text(out)
    if not detail:
        return jobs
    extra = runner.run(["squeue", "--all", "--noheader", f"--states={states}",
                        "--format=%i|%x|%f"]).stdout
    narrowing = narrowing_from_squeue_text(extra)
    return [replace(j, excluded_nodes=narrowing[j.job_id][0], features=narrowing[j.job_id][1])
            if j.job_id in narrowing else j for j in jobs]


def narrowing_from_squeue_text(text: str) -> dict[int, tuple[tuple[str, ...], str]]:
    """Each job's excluded nodes (-x) and features (-C) from ``squeue --format=%i|%x|%f``
    (features last: an OR of them holds "|")."""
    out: dict[int, tuple[tuple[str, ...], str]] = {}
    for line in text.splitlines():
        parts = line.strip().split("|", 2)
        if len(parts) != 3 or not parts[0].isdigit():
            continue
        excluded, features = parts[1].strip(), parts[2].strip()
        out[int(parts[0])] = (
            tuple(hostlist.expand_hostlist(excluded)) if excluded and excluded != "(null)"
            else (), "" if features == "(null)" else features)
    return out


def read_job(runner: Runner, job_id: int) -> JobInfo | None:
    """One job (any state), or None when slurmctld does not know it (any more)."""
    proc = runner.run(["squeue", "--noheader", "--states=all", f"--jobs={job_id}",
                       "--Format", SQUEUE_FORMAT], check=False)
    if proc.returncode != 0:
        return None
    return next((j for j in jobs_from_squeue_text(proc.stdout) if j.job_id == job_id), None)


def unfinished_tasks(runner: Runner, job_id: int) -> int:
    """How many tasks of job (array) ``job_id`` are not finished yet (squeue lists a job
    array's pending tasks as one line, ``ID_[a-b]``, counted here as their number)."""
    proc = runner.run(["squeue", "--noheader", f"--jobs={job_id}",
                       f"--states={SQUEUE_UNFINISHED}", "--format=%i"], check=False)
    if proc.returncode != 0:  # slurmctld no longer knows the job: nothing left
        return 0
    count = 0
    for line in proc.stdout.split():
        task = line.partition("_")[2]
        if task.startswith("["):  # [0-7] or [2,4-7%2] (at most 2 at once)
            inner = task.strip("[]").split("%")[0]
            count += len(hostlist.expand_hostlist(f"t[{inner}]"))
        else:
            count += 1
    return count
