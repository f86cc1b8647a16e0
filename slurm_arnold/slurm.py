"""The Slurm adapter: the only module of slurm-arnold that runs Slurm commands.

Every command is logged at DEBUG before it runs; a failure raises ``SlurmError`` carrying the
command, exit code, stdout and stderr; a missing command raises ``SlurmNotFound``. Commands honour
``SLURM_CONF`` through the environment, as Slurm's own commands do.

Where this Slurm's ``--json`` schema is one we have a parser for we use it: OpenAPI v0.0.38
(Slurm 22.05: ``sinfo``/``squeue``/``sacct --json``) and data_parser v0.0.42 to v0.0.45 (Slurm
24.11 to 26.05: ``scontrol show nodes``/``squeue``/``sacct --json``, numbers wrapped as
``{set, infinite, number}`` and states as lists). Slurm's version is read once per adapter and
picks the parser; any other schema (23.02 to 24.05, or one newer than we know) falls back to the
stable text forms (``scontrol show ... --oneliner``, ``squeue``/``sacct`` with explicit
``--format`` and ``--parsable2``), which every version also gets in the tests. Reservations and
topology are always read as text.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import hostlist

from slurm_arnold.errors import SlurmConfMissing, SlurmError, SlurmNotFound, SlurmOutputError

log = logging.getLogger(__name__)

# Node states in which a node is down or being emptied; a node with any of them is not free.
UNAVAILABLE_FLAGS = frozenset(
    {"DRAIN", "DRAINING", "DRAINED", "DOWN", "FAIL", "FAILING", "NOT_RESPONDING",
     "MAINTENANCE", "MAINT", "POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN", "POWERING_UP",
     "REBOOT_REQUESTED", "REBOOT_ISSUED", "INVALID_REG", "FUTURE", "UNKNOWN", "PLANNED",
     "COMPLETING"}
)


@dataclass(frozen=True)
class NodeInfo:
    """One node as slurmctld sees it."""

    name: str
    state: str  # base state, upper case: IDLE, MIXED, ALLOCATED, DOWN, ...
    flags: frozenset[str]
    partitions: tuple[str, ...]
    gpus_total: int
    gpus_used: int
    features: frozenset[str] = frozenset()

    @property
    def gpus_free(self) -> int:
        """GPUs not allocated to a job (0 when the node is unavailable)."""
        if self.flags & UNAVAILABLE_FLAGS or self.state in UNAVAILABLE_FLAGS:
            return 0
        return max(0, self.gpus_total - self.gpus_used)

    @property
    def state_text(self) -> str:
        """State with its flags, as ``sinfo -O StateComplete`` prints it (lower case)."""
        return "+".join([self.state.lower(), *sorted(f.lower() for f in self.flags)])


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
        """Held by a user or an admin (``scontrol hold``)."""
        return self.reason in ("JobHeldAdmin", "JobHeldUser")


def _gpus_in_tres(text: str | None) -> int:
    """GPUs in a TRES string such as ``cpu=4,node=4,gres/gpu=32``.

    Where typed GPUs are tracked too (``gres/gpu=8,gres/gpu:a100=8``) the untyped count is
    their total already; typed counts are summed only when it is absent.
    """
    untyped = re.search(r"(?:^|,)gres/gpu=(\d+)", text or "")
    if untyped:
        return int(untyped.group(1))
    return sum(int(m.group(1)) for m in
               re.finditer(r"(?:^|,)gres/gpu:[\w.-]+=(\d+)", text or ""))


@dataclass(frozen=True)
class Reservation:
    """One Slurm reservation."""

    name: str
    nodes: tuple[str, ...]
    start_time: str
    end_time: str
    users: tuple[str, ...]
    flags: tuple[str, ...]
    state: str


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


def parse_gpu_count(gres: str | None) -> int:
    """GPUs in a GRES string such as ``gpu:8``, ``gpu:a100:4(S:0-1)``, ``gpu:2(IDX:0,2)``."""
    if not gres or gres in ("(null)", "N/A"):
        return 0
    total = 0
    for match in re.finditer(r"(?:^|,)gpu(?::[A-Za-z0-9_.\-]+)?:(\d+)", gres):
        total += int(match.group(1))
    return total


def parse_oneliner(line: str) -> dict[str, str]:
    """Split ``scontrol show ... --oneliner`` output into keys and values.

    Values may contain spaces (``OS=Linux 6.1 #1 SMP``): a token without ``=`` belongs to the
    value before it.
    """
    out: dict[str, str] = {}
    last: str | None = None
    for token in line.split():
        key, eq, value = token.partition("=")
        if eq and re.fullmatch(r"[A-Za-z][A-Za-z0-9_/:]*", key):
            out[key] = value
            last = key
        elif last is not None:
            out[last] += " " + token
    return out


def _features(text: str | None) -> frozenset[str]:
    if not text or text == "(null)":
        return frozenset()
    return frozenset(f for f in text.split(",") if f)


def _split_state(raw: str) -> tuple[str, frozenset[str]]:
    """``IDLE+DRAIN`` or ``idle*`` to a base state and flags."""
    text = raw.strip().upper()
    flags = set()
    # sinfo/scontrol suffixes: * not responding, ~ powered off, # powering up, % powering down.
    suffixes = {"*": "NOT_RESPONDING", "~": "POWERED_DOWN", "#": "POWERING_UP",
                "%": "POWERING_DOWN", "!": "POWER_DOWN", "$": "MAINTENANCE",
                "@": "REBOOT_REQUESTED"}
    while text and text[-1] in suffixes:
        flags.add(suffixes[text[-1]])
        text = text[:-1]
    parts = text.split("+")
    return parts[0], frozenset(flags | set(parts[1:]))


def _number(value: Any) -> int | None:
    """An integer of a v0.0.4x document: ``{"set", "infinite", "number"}`` (None when unset
    or infinite), or a plain number."""
    if isinstance(value, Mapping):
        if not value.get("set") or value.get("infinite"):
            return None
        value = value.get("number")
    if value is None or isinstance(value, bool):
        return None
    return int(value)


#: Job state flags that Slurm's own text shows instead of the base state, in the order its
#: ``job_state_string`` tests them (v0.0.4x lists them beside the base state).
_JOB_STATE_SHOWN_FLAGS = ("COMPLETING", "STAGE_OUT", "CONFIGURING", "RESIZING", "REQUEUED",
                          "REQUEUE_FED", "REQUEUE_HOLD", "SPECIAL_EXIT", "STOPPED",
                          "RESV_DEL_HOLD", "SIGNALING")


def _job_state(states: Any) -> str:
    """A v0.0.4x job state list (``["RUNNING", "COMPLETING"]``) as the one word squeue prints."""
    if isinstance(states, str):
        return states.upper()
    words = [str(s).upper() for s in states or ()]
    for flag in _JOB_STATE_SHOWN_FLAGS:
        if flag in words:
            return flag
    return words[0] if words else ""


def _nodes_from_json(doc: Mapping[str, Any]) -> list[NodeInfo]:
    """Nodes of ``sinfo --json`` (v0.0.38: a state word, ``state_flags``, features as text)
    or ``scontrol show nodes --json`` (v0.0.42 to v0.0.45: the state as a list of words,
    features as a list)."""
    out = []
    for n in doc["nodes"]:
        state = n.get("state") or "UNKNOWN"
        words = [str(w) for w in state] if isinstance(state, list) else [str(state)]
        base, flags = _split_state("+".join(words or ["UNKNOWN"]))
        features = n.get("active_features")
        out.append(NodeInfo(
            name=n["name"],
            state=base,
            flags=flags | frozenset(str(f).upper() for f in n.get("state_flags") or []),
            partitions=tuple(n.get("partitions") or ()),
            gpus_total=parse_gpu_count(n.get("gres")),
            gpus_used=parse_gpu_count(n.get("gres_used")),
            features=_features(",".join(features) if isinstance(features, list)
                               else features),
        ))
    return out


def _nodes_from_scontrol(text: str) -> list[NodeInfo]:
    out = []
    for line in text.splitlines():
        if not line.startswith("NodeName="):
            continue
        f = parse_oneliner(line)
        base, flags = _split_state(f.get("State", "UNKNOWN"))
        used = re.search(r"gres/gpu=(\d+)", f.get("AllocTRES", ""))
        out.append(NodeInfo(
            name=f["NodeName"],
            state=base,
            flags=flags,
            partitions=tuple(p for p in f.get("Partitions", "").split(",") if p),
            gpus_total=parse_gpu_count(f.get("Gres")),
            gpus_used=int(used.group(1)) if used else 0,
            features=_features(f.get("ActiveFeatures")),
        ))
    return out


def _jobs_from_json(doc: Mapping[str, Any]) -> list[JobInfo]:
    """``squeue --json``: v0.0.38's plain numbers and state word, or v0.0.42 to v0.0.45's
    ``{set, infinite, number}`` numbers and state lists (``_number``, ``_job_state``)."""
    out = []
    for j in doc["jobs"]:
        nodes = j.get("nodes") or ""
        required = j.get("required_nodes") or ""
        excluded = j.get("excluded_nodes") or ""
        out.append(JobInfo(
            job_id=int(j["job_id"]),
            name=j.get("name") or "",
            user=j.get("user_name") or str(j.get("user_id", "")),
            state=_job_state(j.get("job_state")),
            nodes=tuple(hostlist.expand_hostlist(nodes)) if nodes else (),
            partition=j.get("partition") or "",
            time_limit_min=_number(j.get("time_limit")),
            start_time=_number(j.get("start_time")) or None,
            end_time=_number(j.get("end_time")) or None,
            # v0.0.38 names it resv_name too ("reservation" is not in the object)
            reservation=j.get("resv_name") or None,
            node_count=_number(j.get("node_count")) or 0,
            gpus=_gpus_in_tres(j.get("tres_alloc_str") or j.get("tres_req_str")),
            submit_time=_number(j.get("submit_time")) or None,
            required_nodes=tuple(hostlist.expand_hostlist(required)) if required else (),
            reason=str(j.get("state_reason") or ""),
            priority=_number(j.get("priority")) or 0,
            excluded_nodes=tuple(hostlist.expand_hostlist(excluded)) if excluded else (),
            features=str(j.get("features") or ""),
        ))
    return out


# Name comes last: it is the one field a user chooses freely (it may hold "|"), so a line is
# split into exactly as many fields as there are, the rest of it being the name.
_SQUEUE_FIELDS = ["JobID", "UserName", "State", "NodeList", "Partition", "TimeLimit",
                  "StartTime", "EndTime", "Reservation", "NumNodes", "tres-alloc",
                  "SubmitTime", "ReqNodes", "Reason", "PriorityLong", "Name"]
_SQUEUE_FORMAT = ",".join(f"{name}:|" for name in _SQUEUE_FIELDS)
#: Every state of a job that is not finished (what ``taken_by_queue`` must see).
_SQUEUE_UNFINISHED = "PENDING,RUNNING,SUSPENDED,COMPLETING,CONFIGURING,RESIZING,REQUEUED," \
    "REQUEUE_FED,REQUEUE_HOLD,SIGNALING,STAGE_OUT,STOPPED,RESV_DEL_HOLD,SPECIAL_EXIT"
UNFINISHED = frozenset(_SQUEUE_UNFINISHED.split(","))


def _parse_duration_min(text: str) -> int | None:
    """Slurm's ``[days-]hours:minutes:seconds`` (or ``UNLIMITED``) in whole minutes."""
    text = text.strip()
    if not text or text.upper() in ("UNLIMITED", "INFINITE", "NONE", "N/A", "PARTITION_LIMIT"):
        return None
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d)
    parts = [int(p) for p in text.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    h, m, s = parts[-3:]
    return days * 1440 + h * 60 + m + (1 if s else 0)


def parse_time_limit(text: str) -> int | None:
    """An sbatch ``--time`` value in seconds (``None`` for UNLIMITED); ``ValueError`` if bad.

    sbatch's forms: ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``.
    """
    text = text.strip()
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    days, rest = (text.split("-", 1) if "-" in text else ("", text))
    parts = rest.split(":")
    if not all(p.isdigit() for p in [*parts, *([days] if days else [])]) or len(parts) > 3:
        raise ValueError(f"{text!r} is not a Slurm time ([D-]H:M:S, M:S or M)")
    nums = [int(p) for p in parts]
    if days:
        h, m, sec = [*nums, 0, 0][:3]
        return ((int(days) * 24 + h) * 60 + m) * 60 + sec
    if len(nums) == 1:
        return nums[0] * 60
    if len(nums) == 2:
        return nums[0] * 60 + nums[1]
    return (nums[0] * 60 + nums[1]) * 60 + nums[2]


def _parse_time(text: str) -> int | None:
    text = text.strip()
    if not text or text in ("N/A", "Unknown", "None", "(null)"):
        return None
    try:
        return int(datetime.fromisoformat(text).timestamp())
    except ValueError:
        return None


def _jobs_from_squeue_text(text: str) -> list[JobInfo]:
    """Jobs from ``squeue --noheader --Format`` with ``_SQUEUE_FIELDS``, each ended by "|"."""
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        f = line.removesuffix("|").split("|", len(_SQUEUE_FIELDS) - 1)
        if len(f) != len(_SQUEUE_FIELDS) or not f[0].strip().isdigit():
            raise SlurmOutputError(f"squeue: unexpected line {line!r}")
        f = [field.strip() for field in f[:-1]] + [f[-1]]
        nodes, required = f[3], f[12]
        out.append(JobInfo(
            job_id=int(f[0]), name=f[15], user=f[1], state=f[2].upper(),
            nodes=tuple(hostlist.expand_hostlist(nodes)) if nodes and nodes != "(null)" else (),
            partition=f[4], time_limit_min=_parse_duration_min(f[5]),
            start_time=_parse_time(f[6]), end_time=_parse_time(f[7]),
            reservation=f[8] if f[8] not in ("", "(null)") else None,
            node_count=int(f[9]) if f[9].isdigit() else 0,
            gpus=_gpus_in_tres(f[10]),
            submit_time=_parse_time(f[11]),
            required_nodes=tuple(hostlist.expand_hostlist(required))
            if required and required != "(null)" else (),
            reason=f[13],
            priority=int(f[14]) if f[14].isdigit() else 0,
        ))
    return out


def _gpus_from_tres(tres: Sequence[Mapping[str, Any]]) -> int:
    return sum(int(t.get("count") or 0) for t in tres
               if t.get("type") == "gres" and t.get("name") == "gpu")


def _accounting_from_json(doc: Mapping[str, Any]) -> list[AccountingRecord]:
    """``sacct --json`` of v0.0.38 or v0.0.42 to v0.0.45 (as ``_jobs_from_json``)."""
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
            state=_job_state(j.get("state", {}).get("current")),
            exit_code=_number(j.get("exit_code", {}).get("return_code")) or 0,
            nodes=tuple(expanded),
            # 22.05 briefly shows a finished job as a bare "allocation" record with
            # allocation_nodes 0 (and one node listed): keep that 0 so callers can tell.
            node_count=int(j["allocation_nodes"]) if "allocation_nodes" in j
            else len(expanded),
            gpus=_gpus_from_tres(j.get("tres", {}).get("allocated") or []),
            submit=_number(t.get("submission")) or None,
            start=_number(t.get("start")) or None,
            end=_number(t.get("end")) or None,
            time_limit_min=_number(t.get("limit")),
        ))
    return out


_SACCT_FIELDS = ["JobIDRaw", "JobName", "User", "Group", "Account", "Partition", "QOS", "State",
                 "ExitCode", "NodeList", "NNodes", "AllocTRES", "Submit", "Start", "End",
                 "TimelimitRaw"]


def _accounting_from_sacct_text(text: str) -> list[AccountingRecord]:
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        f = line.split("|")
        if len(f) != len(_SACCT_FIELDS):
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
            submit=_parse_time(f[12]), start=_parse_time(f[13]), end=_parse_time(f[14]),
            time_limit_min=int(limit) if limit.isdigit() else None,
        ))
    return out


def _reservations_from_scontrol(text: str) -> list[Reservation]:
    out = []
    for line in text.splitlines():
        if not line.startswith("ReservationName="):
            continue
        f = parse_oneliner(line)
        nodes = f.get("Nodes", "")
        users = f.get("Users", "(null)")
        out.append(Reservation(
            name=f["ReservationName"],
            nodes=tuple(hostlist.expand_hostlist(nodes)) if nodes and nodes != "(null)" else (),
            start_time=f.get("StartTime", ""),
            end_time=f.get("EndTime", ""),
            users=tuple(u for u in users.split(",") if u and users != "(null)"),
            flags=tuple(x for x in f.get("Flags", "").split(",") if x and x != "(null)"),
            state=f.get("State", ""),
        ))
    return out


# 26.05 prints a stray word after the time ("... to start at <time> a using ..."): one token
# there is allowed, nothing else.
_TEST_ONLY = re.compile(
    r"^sbatch: Job \d+ to start at \S+(?: \S+)? using \d+ processors on nodes (\S+) "
    r"in partition \S+$"
)


def parse_test_only(text: str) -> list[str]:
    """Nodes from sbatch's ``--test-only`` line
    (``sbatch: Job 8 to start at <time> using 256 processors on nodes n[001-016] in partition
    gpu``); raises ``SlurmOutputError`` on anything else."""
    for line in text.splitlines():
        match = _TEST_ONLY.match(line.strip())
        if match:
            return list(hostlist.expand_hostlist(match.group(1)))
    raise SlurmOutputError(f"sbatch --test-only: no placement line in {text.strip()!r}")


def slurm_commands_dir(path: str | None = None) -> str | None:
    """The directory of the Slurm commands this process would run (``scontrol`` on PATH,
    or on ``path``) when it is not one a minimal PATH has anyway (/usr/bin, /bin): what a
    program started with a clean environment (slurmctld's prolog, a user's session) needs
    first on its PATH to reach the same Slurm."""
    import shutil

    found = shutil.which("scontrol", path=path)
    if found is None:
        return None
    directory = os.path.dirname(os.path.abspath(found))
    return None if directory in ("/usr/bin", "/bin") else directory


def _json_version(doc: Mapping[str, Any]) -> str:
    meta = doc.get("meta", {})
    plugin = meta.get("plugin", {})
    return str(plugin.get("type") or plugin.get("data_parser") or "")


#: The --json schemas each parser family reads, as ``meta.plugin`` names them.
JSON_V0038 = frozenset({"openapi/v0.0.38", "openapi/dbv0.0.38"})
JSON_V004X = frozenset(f"data_parser/v0.0.{n}" for n in range(42, 46))


def json_family(version: tuple[int, int]) -> str | None:
    """Which of our JSON parsers a Slurm of ``version`` needs ("v0.0.38", "v0.0.4x"), or
    None for text (23.02 to 24.05, whose schemas we do not read)."""
    if version == (22, 5):
        return "v0.0.38"
    if version >= (24, 11):
        return "v0.0.4x"
    return None


class Slurm:
    """Runs Slurm's commands. ``env`` overrides the environment (e.g. ``SLURM_CONF``)."""

    def __init__(self, env: Mapping[str, str] | None = None, *, use_json: bool = True,
                 timeout: float = 120.0) -> None:
        self.env = dict(os.environ if env is None else env)
        self.use_json = use_json
        self.timeout = timeout
        self._version: tuple[int, int] | None = None

    # -- running commands -------------------------------------------------------------
    def require_config(self) -> None:
        """``SlurmConfMissing`` when ``SLURM_CONF`` names a file that is not there: Slurm's
        commands would look for a configless controller first and give up only after a
        minute. Commands that would write state first call this before touching anything."""
        conf = self.env.get("SLURM_CONF")
        if conf is not None and not os.path.isfile(conf):
            raise SlurmConfMissing(conf)

    def run(self, args: Sequence[str], *, input: str | None = None,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run one Slurm command; raise ``SlurmError`` when it fails and ``check`` is set."""
        cmd = list(args)
        self.require_config()
        log.debug("running: %s", shlex.join(cmd))
        try:
            proc = subprocess.run(cmd, input=input, capture_output=True, text=True,
                                  env=self.env, timeout=self.timeout)
        except FileNotFoundError:
            raise SlurmNotFound(cmd[0]) from None
        except subprocess.TimeoutExpired as exc:
            raise SlurmError(cmd, -1, str(exc.stdout or ""),
                             f"timed out after {self.timeout:.0f} s") from None
        if check and proc.returncode != 0:
            raise SlurmError(cmd, proc.returncode, proc.stdout, proc.stderr)
        return proc

    @property
    def json_family(self) -> str | None:
        """The JSON parser family for this Slurm (``json_family``), None for text."""
        return json_family(self.version()) if self.use_json else None

    def _json(self, args: Sequence[str]) -> dict[str, Any] | None:
        """Run a ``--json`` command; ``None`` when its schema is not the family's (we then
        read text, and do so from now on)."""
        family = self.json_family
        if family is None:
            return None
        out = self.run([*args, "--json"]).stdout
        try:
            doc: dict[str, Any] = json.loads(out)
        except json.JSONDecodeError as exc:
            raise SlurmOutputError(f"{args[0]} --json: not JSON ({exc})") from None
        schemas = JSON_V0038 if family == "v0.0.38" else JSON_V004X
        if _json_version(doc) not in schemas:
            log.debug("%s --json: schema %r has no parser, using text", args[0], _json_version(doc))
            self.use_json = False
            return None
        return doc

    # -- cluster ------------------------------------------------------------------------
    def version(self) -> tuple[int, int]:
        """Slurm's (major, minor) version, from ``sinfo --version`` (read once)."""
        if self._version is None:
            out = self.run(["sinfo", "--version"]).stdout
            m = re.search(r"(\d+)\.(\d+)", out)
            if not m:
                raise SlurmOutputError(f"sinfo --version: cannot read {out.strip()!r}")
            self._version = int(m.group(1)), int(m.group(2))
        return self._version

    def nodes(self) -> list[NodeInfo]:
        """Every node with its state and GPUs."""
        # 26.05's sinfo --json groups nodes alike; its scontrol lists each one.
        doc = self._json(["sinfo"] if self.json_family == "v0.0.38"
                         else ["scontrol", "show", "nodes"])
        if doc is not None:
            return _nodes_from_json(doc)
        return _nodes_from_scontrol(self.run(["scontrol", "show", "node", "--oneliner"]).stdout)

    def topology_text(self, name: str | None = None) -> str:
        """The raw ``scontrol show topology`` output: the cluster's default topology, or the
        one of topology.yaml called ``name`` (Slurm 25.05+; see ``partition_topology``)."""
        return self.run(["scontrol", "show", "topology", *([name] if name else [])]).stdout

    def partition_topology(self, partition: str) -> str | None:
        """The topology.yaml topology ``partition`` uses (its ``Topology=``), None where the
        partition names none (every partition before Slurm 25.05)."""
        out = self.run(["scontrol", "show", "partition", partition, "--oneliner"]).stdout
        for line in out.splitlines():
            f = parse_oneliner(line)
            if f.get("PartitionName") == partition:
                return f.get("Topology") or None
        return None

    def default_partition(self) -> str | None:
        """The cluster's default partition, if one is set."""
        out = self.run(["scontrol", "show", "partition", "--oneliner"]).stdout
        for line in out.splitlines():
            f = parse_oneliner(line)
            if f.get("Default") == "YES":
                return f.get("PartitionName")
        return None

    # -- jobs ---------------------------------------------------------------------------
    def jobs(self, *, unfinished: bool = False) -> list[JobInfo]:
        """Every job slurmctld still knows, or with ``unfinished`` only those not finished.

        ``unfinished`` asks squeue for text filtered by state: its ``--json`` ignores every
        filter (22.05) and lists each finished job slurmctld keeps (``MinJobAge``) at a few
        kilobytes apiece, which arnold-sbatch would pay inside the site lock on every submission.
        """
        if not unfinished:
            # 22.05's --json ignores filters and lists every job; 26.05's applies squeue's
            # default (unfinished jobs of visible partitions) unless told otherwise.
            doc = self._json(["squeue"] if self.json_family == "v0.0.38"
                             else ["squeue", "--all", "--states=all"])
            if doc is not None:
                return _jobs_from_json(doc)
        states = _SQUEUE_UNFINISHED if unfinished else "all"
        out = self.run(["squeue", "--all", "--noheader", f"--states={states}", "--Format",
                        _SQUEUE_FORMAT]).stdout
        return _jobs_from_squeue_text(out)

    def submit(self, args: Sequence[str], script: str | None = None) -> int:
        """Submit with ``sbatch --parsable``; return the job id.

        ``args`` are sbatch's options (and a script path); ``script`` is sent on stdin.
        """
        proc = self.run(["sbatch", "--parsable", *args], input=script)
        first = proc.stdout.strip().split(";", 1)[0]
        if not first.isdigit():
            raise SlurmOutputError(f"sbatch --parsable printed {proc.stdout.strip()!r}")
        return int(first)

    def unfinished_tasks(self, job_id: int) -> int:
        """How many tasks of job (array) ``job_id`` are not finished yet (squeue lists a job
        array's pending tasks as one line, ``ID_[a-b]``, counted here as their number)."""
        proc = self.run(["squeue", "--noheader", f"--jobs={job_id}",
                         f"--states={_SQUEUE_UNFINISHED}", "--format=%i"], check=False)
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

    def test_only(self, args: Sequence[str]) -> list[str]:
        """The nodes slurmctld would give a job now (``sbatch --test-only``), in its order.

        sbatch answers only in text; ``parse_test_only`` reads that one line narrowly.
        """
        proc = self.run(["sbatch", "--test-only", *args, "--wrap", "true"])
        return parse_test_only(proc.stderr + proc.stdout)

    def job(self, job_id: int) -> JobInfo | None:
        """One job (any state), or None when slurmctld does not know it (any more)."""
        proc = self.run(["squeue", "--noheader", "--states=all", f"--jobs={job_id}",
                         "--Format", _SQUEUE_FORMAT], check=False)
        if proc.returncode != 0:
            return None
        return next((j for j in _jobs_from_squeue_text(proc.stdout) if j.job_id == job_id),
                    None)

    def batch_script(self, job_id: int, limit: int = 1 << 20) -> str | None:
        """The first ``limit`` bytes of a batch job's script as slurmctld keeps it (``scontrol
        write batch_script``: the job's owner, an operator or SlurmUser), or None for a job
        without one (salloc, srun) or one this caller may not read."""
        proc = self.run(["scontrol", "write", "batch_script", str(job_id), "-"], check=False)
        if proc.returncode != 0:
            return None
        return proc.stdout[:limit]

    def cancel(self, job_id: int) -> None:
        """Cancel a job."""
        self.run(["scancel", str(job_id)])

    def update_job(self, job_id: int, **fields: str) -> None:
        """``scontrol update JobId=... Key=Value ...`` (an empty value clears the field)."""
        self.run(["scontrol", "update", f"JobId={job_id}",
                  *(f"{k}={v}" for k, v in fields.items())])

    def hold(self, job_id: int) -> None:
        """Hold a pending job (``scontrol hold``)."""
        self.run(["scontrol", "hold", str(job_id)])

    def release(self, job_id: int) -> None:
        """Release a held job (``scontrol release``)."""
        self.run(["scontrol", "release", str(job_id)])

    def slurm_user(self) -> str:
        """``SlurmUser`` of the cluster (``scontrol show config``), e.g. ``slurm``."""
        for line in self.run(["scontrol", "show", "config"]).stdout.splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "SlurmUser":
                return value.strip().split("(")[0]
        raise SlurmOutputError("scontrol show config: no SlurmUser line")

    # -- reservations -------------------------------------------------------------------
    def reservations(self) -> list[Reservation]:
        """Every reservation."""
        return _reservations_from_scontrol(
            self.run(["scontrol", "show", "reservation", "--oneliner"]).stdout
        )

    def create_reservation(self, name: str, nodes: Sequence[str], *, users: Sequence[str],
                           start: str = "now", duration: str = "UNLIMITED",
                           flags: Sequence[str] = ()) -> None:
        """Create a reservation on exactly ``nodes`` for ``users``."""
        args = ["scontrol", "create", "reservation", f"ReservationName={name}",
                f"Nodes={hostlist.collect_hostlist(list(nodes))}", f"StartTime={start}",
                f"Duration={duration}", f"Users={','.join(users)}"]
        if flags:
            args.append(f"Flags={','.join(flags)}")
        self.run(args)

    def update_reservation(self, name: str, **fields: str) -> None:
        """Update fields (``Nodes``, ``StartTime``, ``Users``, ...) of a reservation."""
        self.run(["scontrol", "update", f"ReservationName={name}",
                  *(f"{k}={v}" for k, v in fields.items())])

    def delete_reservation(self, name: str) -> None:
        """Delete a reservation."""
        self.run(["scontrol", "delete", f"ReservationName={name}"])

    # -- accounting ---------------------------------------------------------------------
    def accounting(self, job_ids: Sequence[int] = (), *, since: str | None = None,
                   all_users: bool = True) -> list[AccountingRecord]:
        """Finished and running jobs from slurmdbd (``sacct``)."""
        args = ["sacct", "--allocations"]
        if all_users:
            args.append("--allusers")
        if job_ids:
            args.append("--jobs=" + ",".join(str(j) for j in job_ids))
        if since:
            args.append(f"--starttime={since}")
        doc = self._json(args)
        if doc is not None:
            return _accounting_from_json(doc)
        out = self.run([*args, "--parsable2", "--noheader",
                        "--format=" + ",".join(_SACCT_FIELDS)]).stdout
        return _accounting_from_sacct_text(out)

    def finished_accounting(self, job_ids: Sequence[int],
                            timeout: float = 60.0) -> dict[int, AccountingRecord]:
        """Each job's final, settled record, waiting (bounded) until slurmdbd has it whole.

        slurmctld reports a job ended before slurmdbd has its end, and slurmdbd's record is
        briefly partial (:attr:`AccountingRecord.settled`). Raises :class:`SlurmOutputError`
        naming the jobs still unsettled after ``timeout`` seconds."""
        wanted = set(job_ids)
        if not wanted:  # sacct without --jobs would list every job
            return {}
        deadline = time.monotonic() + timeout
        while True:
            ready = {r.job_id: r for r in self.accounting(sorted(wanted))
                     if r.end is not None and r.state not in UNFINISHED and r.settled}
            if wanted <= ready.keys():
                return ready
            if time.monotonic() >= deadline:
                missing = sorted(wanted - ready.keys())
                raise SlurmOutputError(
                    f"sacct has no final record of job(s) {missing} after {timeout:.0f} s; "
                    "is slurmdbd running and the job finished?")
            time.sleep(0.5)
