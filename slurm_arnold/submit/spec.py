"""What a placed job is, as arnold-sbatch leaves it for the admin side: one JSON file per job,
``<jobs_dir>/<user>/specs/<job id>.json`` (0644, in the user's own directory).

The admin side's ``sync`` reads it to place the job again when its planned nodes become
unusable or better ones free up (``reservations.binder``). It is the user's file, so it is
checked before use: owned by the job's user (Slurm says who that is), every field of the
right type and range, the shape consistent with the job's size in Slurm. A user can only
ever describe their own job, and only within what arnold-sbatch itself accepts.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from site_config import SiteConfig
from slurm_arnold.errors import InfeasibleError
from slurm_arnold.files import write_atomically
from slurm_arnold.placement import NVLINK_GROUPS, JobShape, Parallelism
from slurm_arnold.placement.engine import OFFLINE_ALGOS
from slurm_arnold.rankorder import ORDERS
from slurm_arnold.site_state import FILE_MODE, USER_DIR_MODE, make_dir, user_dir

SPEC_DIR = "specs"


@dataclass(frozen=True)
class JobSpec:
    """A job's shape and how it asked to be placed."""

    job_id: int
    user: str
    placement_id: str
    tp: int
    pp: int
    dp: int
    gpus_per_node: int
    alpha: float
    algo: str
    rank_order: str
    partition: str | None = None
    exclude: str | None = None
    nodelist: str | None = None
    constraint: str | None = None
    cp: int = 1
    ep: int = 1
    nvlink: str = "tp"
    segment_units: int = 1
    segment_stages: int = 1
    #: The user's ``--tier-weight``s: tier name -> [W] or [alpha, beta] (placement.weights).
    tier_weights: dict[str, list[float]] = field(default_factory=dict)

    @property
    def parallelism(self) -> Parallelism:
        """The job's TP, PP, DP, CP, EP, NVLink group and segments."""
        return Parallelism(self.tp, self.pp, self.dp, self.cp, self.ep, self.nvlink,
                           self.segment_units, self.segment_stages)

    @property
    def shape(self) -> JobShape:
        """The matrix placed on its nodes (``Parallelism.shape``)."""
        return self.parallelism.shape(self.gpus_per_node)

    def narrowing(self) -> dict[str, str]:
        """The sbatch options that narrow where it may run (``submit.flow.narrow_free``)."""
        return {k: v for k, v in (("exclude", self.exclude), ("nodelist", self.nodelist),
                                  ("constraint", self.constraint)) if v}


class BadSpec(ValueError):
    """A spec file that cannot be trusted or read."""


def write_spec(config: SiteConfig, spec: JobSpec) -> Path:
    """Write the caller's spec of one of their jobs (atomically, 0644)."""
    directory = user_dir(config) / SPEC_DIR
    make_dir(directory, USER_DIR_MODE)
    path = directory / f"{spec.job_id}.json"
    write_atomically(path, json.dumps(asdict(spec)), FILE_MODE)
    return path


def spec_path(config: SiteConfig, user: str, job_id: int) -> Path:
    """Where ``user``'s spec of job ``job_id`` is."""
    return config.users_dir / user / SPEC_DIR / f"{job_id}.json"


def read_spec(config: SiteConfig, user: str, uid: int, job_id: int,
              nodes: int | None = None) -> JobSpec | None:
    """The spec of ``user``'s job ``job_id``, or ``None`` when there is none (a job not
    placed by arnold-sbatch). Raises ``BadSpec`` when the file is not the user's own, or
    malformed, or inconsistent with the ``nodes`` Slurm says the job has."""
    path = spec_path(config, user, job_id)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BadSpec(f"{path}: cannot open ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if info.st_uid != uid or info.st_mode & 0o022:
            raise BadSpec(f"{path}: not {user}'s own file, or writable by others")
        if info.st_size > 65536:
            raise BadSpec(f"{path}: larger than 64 KiB")
        try:
            doc = json.loads(fh.read())
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BadSpec(f"{path}: not JSON ({exc})") from None
    spec = _validated(doc, path)
    if spec.job_id != job_id or spec.user != user:
        raise BadSpec(f"{path}: describes job {spec.job_id} of {spec.user}")
    try:
        shape = spec.shape
    except InfeasibleError as exc:
        raise BadSpec(f"{path}: {exc}") from None
    if nodes is not None and shape.nodes != nodes:
        raise BadSpec(f"{path}: TP x CP x PP x DP is {shape.nodes} nodes, Slurm says {nodes}")
    return spec


def _validated(doc: Any, path: Path) -> JobSpec:
    if not isinstance(doc, dict):
        raise BadSpec(f"{path}: not a JSON object")

    def whole(key: str, low: int = 1, high: int = 1 << 20) -> int:
        value = doc.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise BadSpec(f"{path}: {key} must be a whole number in {low}..{high}")
        return value

    def text(key: str, pattern: str, optional: bool = False) -> str | None:
        value = doc.get(key)
        if value is None and optional:
            return None
        if not isinstance(value, str) or not re.fullmatch(pattern, value):
            raise BadSpec(f"{path}: bad {key}")
        return value

    alpha = doc.get("alpha")
    if not isinstance(alpha, int | float) or isinstance(alpha, bool) or not 0 <= alpha <= 1:
        raise BadSpec(f"{path}: alpha must be a number in [0, 1]")
    algo = text("algo", "|".join(OFFLINE_ALGOS))  # "slurm" jobs are not re-placed
    order = text("rank_order", "|".join(re.escape(o) for o in ORDERS))
    hostexpr = r"[\w.\-\[\],]{1,4096}"
    return JobSpec(
        job_id=whole("job_id", 1, 1 << 62), user=str(text("user", r"[\w.\-]{1,64}")),
        placement_id=str(text("placement_id", r"[0-9a-f]{8,64}")), tp=whole("tp"),
        pp=whole("pp"), dp=whole("dp"), gpus_per_node=whole("gpus_per_node", 1, 1024),
        alpha=float(alpha), algo=str(algo), rank_order=str(order),
        partition=text("partition", r"[\w.\-]{1,64}", optional=True),
        exclude=text("exclude", hostexpr, optional=True),
        nodelist=text("nodelist", hostexpr, optional=True),
        constraint=text("constraint", r"[\w.&|\-]{1,256}", optional=True),
        # Specs written before CP and EP existed have neither: plain TP x PP x DP.
        cp=whole("cp") if "cp" in doc else 1, ep=whole("ep") if "ep" in doc else 1,
        nvlink=str(text("nvlink", "|".join(NVLINK_GROUPS), optional=True) or "tp"),
        segment_units=whole("segment_units") if "segment_units" in doc else 1,
        segment_stages=whole("segment_stages") if "segment_stages" in doc else 1,
        tier_weights=_tier_weights(doc.get("tier_weights", {}), path))


def _tier_weights(value: Any, path: Path) -> dict[str, list[float]]:
    """The spec's ``tier_weights``: at most 16 tiers, each one or two numbers in [0, 1e6]."""
    def number(x: Any) -> bool:
        return isinstance(x, int | float) and not isinstance(x, bool) and 0 <= x <= 1e6

    if not isinstance(value, dict) or len(value) > 16 or not all(
            isinstance(k, str) and re.fullmatch(r"[\w .\-]{1,64}", k)
            and isinstance(v, list) and len(v) in (1, 2) and all(number(x) for x in v)
            for k, v in value.items()):
        raise BadSpec(f"{path}: tier_weights must map tier names to [W] or [alpha, beta]")
    return {k: [float(x) for x in v] for k, v in value.items()}
