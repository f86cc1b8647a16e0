"""The backend that reads Slurm through pyslurm (libslurm's RPCs in process, no command
started): nodes, jobs, reservations and accounting as the commands backend gives them (the
same records, field for field: ``tests/test_pyslurm_parity_live.py``), and the admin side's
reservation writes. Imported only where ``choice`` checked that pyslurm is built for the
running Slurm's release."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import hostlist
import pyslurm

from slurm_arnold.errors import SlurmError
from slurm_arnold.slurm.accounting import AccountingRecord
from slurm_arnold.slurm.common import job_state, parse_time, split_state
from slurm_arnold.slurm.jobs import UNFINISHED, JobInfo
from slurm_arnold.slurm.nodes import NodeInfo
from slurm_arnold.slurm.reservations import Reservation
from slurm_arnold.slurm.runner import Runner

T = TypeVar("T")
#: How scontrol spells a reservation's start and end (local time, to the second).
_TIME_TEXT = "%Y-%m-%dT%H:%M:%S"
#: Reservation flags pyslurm names (``ReservationFlags``) by scontrol's names, in the order
#: scontrol prints them (Slurm's ``reservation_flags_string``).
_FLAGS = {"MAINT": "MAINTENANCE", "FLEX": "FLEX", "OVERLAP": "OVERLAP",
          "IGNORE_JOBS": "IGNORE_RUNNING_JOBS", "SPEC_NODES": "SPECIFIC_NODES",
          "ALL_NODES": "ALL_NODES", "ANY_NODES": "ANY_NODES", "STATIC": "STATIC_NODES",
          "PART_NODES": "PARTITION_NODES_ONLY", "PURGE_COMP": "PURGE",
          "NO_HOLD_JOBS_AFTER_END": "NO_JOB_HOLD_AFTER_END", "MAGNETIC": "MAGNETIC",
          "USER_DELETE": "USER_DELETION"}


def _expand(names: str | None) -> tuple[str, ...]:
    return tuple(hostlist.expand_hostlist(names)) if names and names != "(null)" else ()


def _gpus(gres: Mapping[str, Any] | None) -> int:
    """GPUs in a pyslurm GRES dict (``{"gpu": 8}`` or ``{"gpu:a100": 4}``): the untyped count
    where there is one, else the typed ones summed (as the commands' parser)."""
    counts = {str(k): int(v) for k, v in (gres or {}).items()
              if str(k) == "gpu" or str(k).startswith("gpu:")}
    return counts["gpu"] if "gpu" in counts else sum(counts.values())


def _tres_gpus(tres: Any) -> int:
    """GPUs of a pyslurm TRES set (``TrackableResources``; None for a job without one)."""
    if not tres:
        return 0
    return _gpus({name: gpu.count for name, gpu in (tres.gres or {}).items()})


def _epoch(value: Any) -> int | None:
    """A pyslurm time (epoch seconds, 0 or None for unset) as the records hold it."""
    return int(value) if value else None


def _rpc(action: str, call: Callable[[], T]) -> T:
    """``call()``, with pyslurm's error raised as the adapter's (callers match the message,
    as they do scontrol's)."""
    try:
        return call()
    except pyslurm.RPCError as exc:
        raise SlurmError(["pyslurm", action], getattr(exc, "errno", 1) or 1, "",
                         str(exc)) from None


class PyslurmBackend:
    """``SlurmBackend`` through pyslurm."""

    name = "pyslurm"

    def __init__(self, runner: Runner) -> None:
        self.runner = runner

    def describe(self) -> str:
        """The backend in words, with pyslurm's version."""
        import importlib.metadata

        return f"pyslurm {importlib.metadata.version('pyslurm')}"

    def nodes(self) -> list[NodeInfo]:
        """Every node with its state and GPUs."""
        loaded = _rpc("Nodes.load", pyslurm.Nodes.load)
        out = []
        for node in loaded.values():
            base, flags = split_state(str(node.state or "UNKNOWN"))
            out.append(NodeInfo(
                name=node.name, state=base, flags=flags,
                partitions=tuple(node.partitions or ()),
                gpus_total=_gpus(node.configured_gres),
                gpus_used=_gpus(node.allocated_gres),
                features=frozenset(node.active_features or ()),
            ))
        return out

    def jobs(self, *, unfinished: bool = False, detail: bool = False) -> list[JobInfo]:
        """Every job slurmctld still knows (``unfinished``: only those not finished); always
        with their excluded nodes and features (``detail``), which the RPC carries."""
        loaded = _rpc("Jobs.load", pyslurm.Jobs.load)
        out = []
        for job in loaded.values():
            state = job_state(job.state)
            if unfinished and state not in UNFINISHED:
                continue
            out.append(JobInfo(
                job_id=int(job.id), name=job.name or "", user=job.user_name or "",
                state=state, nodes=_expand(job.allocated_nodes),
                partition=job.partition or "", time_limit_min=job.time_limit,
                start_time=_epoch(job.start_time), end_time=_epoch(job.end_time),
                reservation=job.reservation or None, node_count=int(job.num_nodes or 0),
                gpus=_tres_gpus(job.allocated_tres) or _tres_gpus(job.requested_tres),
                submit_time=_epoch(job.submit_time),
                required_nodes=_expand(job.required_nodes), reason=job.state_reason or "",
                priority=int(job.priority or 0), excluded_nodes=_expand(job.excluded_nodes),
                features=",".join(job.constraints or ()),
            ))
        return _with_reasons(self.runner, out)

    def reservations(self) -> list[Reservation]:
        """Every reservation."""
        loaded = _rpc("Reservations.load", pyslurm.Reservations.load)
        return [Reservation(
            name=res.name, nodes=_expand(res.nodes),
            start_time=_time_text(res.start_time), end_time=_time_text(res.end_time),
            users=tuple(res.users or ()), flags=tuple(_flag_names(res.flags)),
            state="ACTIVE" if res.is_active else "INACTIVE",
        ) for res in loaded.values()]

    def accounting(self, job_ids: Sequence[int] = (), *, since: str | None = None,
                   all_users: bool = True) -> list[AccountingRecord]:
        """Finished and running jobs from slurmdbd."""
        wanted: dict[str, Any] = {}
        if job_ids:
            wanted["ids"] = list(job_ids)
        if since:
            wanted["start_time"] = parse_time(since) or since
        if not all_users:
            import getpass

            wanted["users"] = [getpass.getuser()]
        loaded = _rpc("db.Jobs.load", lambda: pyslurm.db.Jobs.load(pyslurm.db.JobFilter(**wanted)))
        out = []
        for job in loaded.values():
            nodes = _expand(job.nodelist) if job.nodelist != "None assigned" else ()
            out.append(AccountingRecord(
                job_id=int(job.id), name=job.name or "", user=job.user_name or "",
                # A method, not a property, on pyslurm 25.11's db.Job.
                group=(job.group_name() if callable(job.group_name) else job.group_name) or "",
                account=job.account or "",
                partition=job.partition or "", qos=job.qos or "",
                state=job_state(job.state), exit_code=int(job.exit_code or 0),
                nodes=nodes, node_count=int(job.num_nodes or 0),
                gpus=_tres_gpus(job.allocated_tres),
                submit=_epoch(job.submit_time), start=_epoch(job.start_time),
                end=_epoch(job.end_time), time_limit_min=job.time_limit,
            ))
        return out

    def create_reservation(self, name: str, nodes: Sequence[str], *, users: Sequence[str],
                           start: str = "now", duration: str = "UNLIMITED",
                           flags: Sequence[str] = ()) -> None:
        """Create a reservation on exactly ``nodes`` for ``users``."""
        unknown = [f for f in flags if f not in _FLAGS]
        if unknown:  # pyslurm would drop them without a word
            raise ValueError(f"reservation flag {unknown[0]} has no pyslurm name here")
        res = pyslurm.Reservation(
            name=name, nodes=str(hostlist.collect_hostlist(list(nodes))), users=list(users),
            start_time=datetime.now() if start == "now" else start,
            # pyslurm 25.11.2 hands a digit string on as text (then fails adding it to the
            # start): minutes as a number.
            duration=int(duration) if duration.isdigit() else duration,
            flags=[_FLAGS[f] for f in flags])
        _rpc("Reservation.create", res.create)

    def update_reservation(self, name: str, **fields: str) -> None:
        """Update fields (``Nodes``, ``StartTime``, ``Users``) of a reservation."""
        changes = pyslurm.Reservation()
        for key, value in fields.items():
            if key == "Nodes":
                changes.nodes = value
            elif key == "Users":
                changes.users = [u for u in value.split(",") if u]
            elif key == "StartTime":
                changes.start_time = datetime.now() if value == "now" else value
            else:
                raise ValueError(f"update_reservation: {key} is not a field pyslurm serves")
        _rpc("Reservation.modify", lambda: pyslurm.Reservation(name=name).modify(changes))

    def delete_reservation(self, name: str) -> None:
        """Delete a reservation."""
        _rpc("Reservation.delete", lambda: pyslurm.Reservation(name=name).delete())


def _with_reasons(runner: Runner, jobs: list[JobInfo]) -> list[JobInfo]:
    """``jobs`` with the reason Slurm records (``Resources``, ``ReqNodeNotAvail``, ...) where
    pyslurm gave its description instead: pyslurm 25.11's ``Job.state_reason`` returns the
    job's ``state_desc`` when slurmctld set one, and nothing else of pyslurm has the reason.
    One ``squeue --json`` for just those jobs (seldom any)."""
    from dataclasses import replace

    described = [j.job_id for j in jobs if " " in j.reason]
    if not described:
        return jobs
    # squeue's text prints the description too; its JSON has the reason.
    doc = runner.json_doc(["squeue", "--states=all", "--jobs=" + ",".join(map(str, described))])
    reasons = {int(j["job_id"]): str(j.get("state_reason") or "")
               for j in (doc or {}).get("jobs", ())}
    return [replace(j, reason=reasons[j.job_id]) if j.job_id in reasons else j for j in jobs]


def _time_text(value: Any) -> str:
    """A reservation's time as scontrol prints it (``2026-12-07T05:00:00``)."""
    if not value:
        return ""
    return time.strftime(_TIME_TEXT, time.localtime(int(value)))


def _flag_names(flags: Any) -> Iterable[str]:
    """A pyslurm flag set as scontrol prints it: its names (``IGNORE_JOBS``), in its order."""
    if flags is None:
        return ()
    present = {str(f.name) for f in type(flags) if f in flags and f.name}
    return [ours for ours, theirs in _FLAGS.items() if theirs in present]
