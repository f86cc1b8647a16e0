"""Accounting: finished and running jobs from slurmdbd, ``sacct --json`` (v0.0.38 or v0.0.42
to v0.0.45) or ``sacct --parsable2`` text."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import hostlist

from slurm_arnold.errors import SlurmOutputError
from slurm_arnold.slurm.common import job_state, number, parse_time
from slurm_arnold.slurm.runner import Runner


@dataclass(frozen=True)
class AccountingRecord:
    """One job from slurmdbd's accounting (``sacct``)."""

    job_id: int
    name: str
    user: str
    group: str
    account: str
    partition: str
    qos: str
    state: str
    exit_code: int
    nodes: tuple[str, ...]
    node_count: int
    gpus: int
    submit: int | None
    start: int | None
    end: int | None
    time_limit_min: int | None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def settled(self) -> bool:
        """Whether slurmdbd's record lists every node the job ran on (or none, if it never ran).

        22.05's slurmdbd shows a job that just started or just ended, for a second or two, with
        its first node only: ``sacct`` text gives ``n001`` with ``NNodes`` 24, ``--json`` gives
        ``n001`` with ``allocation_nodes`` 0. A one-node job is whole either way."""
        return not self.nodes or (self.node_count > 0 and len(self.nodes) == self.node_count)


def gpus_from_tres(tres: Sequence[Mapping[str, Any]]) -> int:
    """GPUs in a v0.0.4x TRES list (``{"type": "gres", "name": "gpu", "count": 8}``)."""
    return sum(int(t.get("count") or 0) for t in tres
               if t.get("type") == "gres" and t.get("name") == "gpu")


def accounting_from_json(doc: Mapping[str, Any]) -> list[AccountingRecord]:
    """``sacct --json`` of v0.0.38 or v0.0.42 to v0.0.45 (as ``jobs_from_json``)."""
    out = []
    for j in doc["jobs"]:
        t = j.get("time", {})
        nodes = j.get("nodes") or ""
        expanded = hostlist.expand_hostlist(nodes) if nodes and nodes != "None assigned" else []
        out.append(AccountingRecord(
            job_id=int(j["job_id"]),
            name=j.get("name") or "",
            user=j.get("user") or "",
            group=j.get("group") or "",
            account=j.get("account") or "",
            partition=j.get("partition") or "",
            qos=j.get("qos") or "",
            state=job_state(j.get("state", {}).get("current")),
            exit_code=number(j.get("exit_code", {}).get("return_code")) or 0,
            nodes=tuple(expanded),
            # 22.05 briefly shows a finished job as a bare "allocation" record with
            # allocation_nodes 0 (and one node listed): keep that 0 so callers can tell.
            node_count=int(j["allocation_nodes"]) if "allocation_nodes" in j
            else len(expanded),
            gpus=gpus_from_tres(j.get("tres", {}).get("allocated") or []),
            submit=number(t.get("submission")) or None,
            start=number(t.get("start")) or None,
            end=number(t.get("end")) or None,
            time_limit_min=number(t.get("limit")),
        ))
    return out


SACCT_FIELDS = ["JobIDRaw", "JobName", "User", "Group", "Account", "Partition", "QOS", "State",
                 "ExitCode", "NodeList", "NNodes", "AllocTRES", "Submit", "Start", "End",
                 "TimelimitRaw"]


def accounting_from_sacct_text(text: str) -> list[AccountingRecord]:
    """Records of ``sacct --parsable2 --noheader`` with ``SACCT_FIELDS`` (steps skipped)."""
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        f = line.split("|")
        if len(f) != len(SACCT_FIELDS):
            raise SlurmOutputError(f"sacct: unexpected line {line!r}")
        if not f[0].isdigit():  # job steps (123.batch) are not jobs
            continue
        nodes = f[9]
        gpus = re.search(r"gres/gpu=(\d+)", f[11])
        limit = f[15].strip()
        out.append(AccountingRecord(
            job_id=int(f[0]), name=f[1], user=f[2], group=f[3], account=f[4], partition=f[5],
            qos=f[6], state=f[7].split()[0].upper() if f[7] else "",
            exit_code=int(f[8].split(":")[0] or 0),
            nodes=tuple(hostlist.expand_hostlist(nodes))
            if nodes and nodes != "None assigned" else (),
            node_count=int(f[10] or 0), gpus=int(gpus.group(1)) if gpus else 0,
            submit=parse_time(f[12]), start=parse_time(f[13]), end=parse_time(f[14]),
            time_limit_min=int(limit) if limit.isdigit() else None,
        ))
    return out


def read_accounting(runner: Runner, job_ids: Sequence[int] = (), *, since: str | None = None,
                    all_users: bool = True) -> list[AccountingRecord]:
    """Finished and running jobs from slurmdbd (``sacct``)."""
    args = ["sacct", "--allocations"]
    if all_users:
        args.append("--allusers")
    if job_ids:
        args.append("--jobs=" + ",".join(str(j) for j in job_ids))
    if since:
        args.append(f"--starttime={since}")
    doc = runner.json_doc(args)
    if doc is not None:
        return accounting_from_json(doc)
    out = runner.run([*args, "--parsable2", "--noheader",
                      "--format=" + ",".join(SACCT_FIELDS)]).stdout
    return accounting_from_sacct_text(out)
