"""Ranks for the nodes a job actually starts on: the work of ``arnold-prolog``.

slurmctld runs ``arnold-prolog`` as its ``PrologSlurmctld`` when it allocates nodes to a job,
before the job's script (and so any task) starts. For a job that wants our ranks it makes sure
the rank file the SPANK plugin will read (``--arnold-rankfile=auto``) is for those very nodes:

* a job arnold-sbatch placed (its spec is in ``<jobs_dir>/<user>/specs/``) that starts on its
  planned nodes needs nothing: its own rank file is right;
* one that starts elsewhere (Slurm chose, it was requeued after a node failed and repaired by
  ``arnold reserve sync``, an admin moved it) gets the best DP x PP mapping of its allocation
  (``slurm_arnold.placement.mapping``) written to ``<state_dir>/rankorder/<job id>.rankorder``,
  the admin side's directory, which the plugin (``rankdir=``) prefers to the user's file;
* a job submitted with plain sbatch whose script has ``#ARNOLD --tp T --pp P`` lines (the
  same lines arnold-sbatch reads) gets the same: ranks for the nodes Slurm gave it.

A job that wants none of this never gets here: the shell wrapper slurmctld runs
(``wrapper_script``, ``arnold site prolog-script``) answers for it in milliseconds with a stat
and one ``scontrol`` call, and starts Python only for jobs that may. Nothing here ever makes
the prolog fail: a failing ``PrologSlurmctld`` requeues the job, which is worse than running it
without our ranks; the plugin then refuses the tasks with one line saying why. What was done
goes to the site's ``bindings`` table (``arnold jobs``) as kind ``start``.
"""

from __future__ import annotations

import logging
import os
import pwd
import secrets
import time
from collections.abc import Mapping as MappingType
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import hostlist

from site_config import SiteConfig
from slurm_arnold.errors import ArnoldError, InfeasibleError, StateError
from slurm_arnold.placement.job import Parallelism
from slurm_arnold.submit.options import directive_lines

if TYPE_CHECKING:
    from slurm_arnold.rankorder import RankEntry
    from slurm_arnold.slurm import Slurm

log = logging.getLogger(__name__)
#: Largest batch script read for ``#ARNOLD`` lines (they must come before the first command).
SCRIPT_LIMIT = 1 << 20
#: Largest rank file read back to compare its nodes.
RANKFILE_LIMIT = 4 << 20


@dataclass(frozen=True)
class StartingJob:
    """A job slurmctld is starting, from the prolog's environment."""

    job_id: int
    user: str
    uid: int
    nodes: tuple[str, ...]
    partition: str | None


@dataclass(frozen=True)
class Wanted:
    """How a job asked for ranks: its TP and PP, rank order and alpha, and where from."""

    source: str  # "arnold-sbatch" or "#ARNOLD lines"
    tp: int
    pp: int
    dp: int | None
    gpus_per_node: int | None
    alpha: float
    rank_order: str
    user_rankfile: Path | None
    cp: int = 1
    ep: int = 1
    nvlink: str = "tp"


def starting_job(env: MappingType[str, str]) -> StartingJob:
    """The job from ``PrologSlurmctld``'s environment (``SLURM_JOB_ID``, ``SLURM_JOB_UID``,
    ``SLURM_JOB_USER``, ``SLURM_JOB_NODELIST``, ``SLURM_JOB_PARTITION``)."""
    try:
        job_id = int(env["SLURM_JOB_ID"])
        uid = int(env["SLURM_JOB_UID"])
        nodelist = env["SLURM_JOB_NODELIST"]
    except (KeyError, ValueError):
        raise ArnoldError("arnold-prolog runs as slurmctld's PrologSlurmctld: SLURM_JOB_ID, "
                          "SLURM_JOB_UID and SLURM_JOB_NODELIST must be set") from None
    user = env.get("SLURM_JOB_USER") or _user_name(uid)
    try:
        nodes = tuple(hostlist.expand_hostlist(nodelist))
    except hostlist.BadHostlist:
        raise ArnoldError(f"SLURM_JOB_NODELIST {nodelist!r} is not a host list") from None
    return StartingJob(job_id, user, uid, nodes, env.get("SLURM_JOB_PARTITION") or None)


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def wanted_from_script(script: str) -> Wanted | None:
    """What ``#ARNOLD`` lines ask for, or None when there are none. Raises ``ArnoldError`` for
    lines that cannot be read (an unknown option, a TP that is not a number)."""
    from slurm_arnold.submit.options import arnold_options, split_args

    if not directive_lines(script, "#ARNOLD"):
        return None
    ours = arnold_options(split_args([]), script)
    if ours.get("placement") == "slurm":
        return None  # the user asked for Slurm's own order
    tp, pp = _whole(ours, "tp"), _whole(ours, "pp")
    if tp is None or pp is None:
        raise ArnoldError("#ARNOLD lines must give both --tp and --pp for ranks at start")
    return Wanted("#ARNOLD lines", tp, pp, _whole(ours, "dp"), None, _alpha(ours),
                  ours.get("rank-order", "tp-dp-pp"), None, _whole(ours, "cp") or 1,
                  _whole(ours, "ep") or 1, ours.get("nvlink-group", "tp"))


def _whole(ours: MappingType[str, str], name: str) -> int | None:
    text = ours.get(name)
    if text is None:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ArnoldError(f"#ARNOLD --{name} {text!r} is not a positive whole number")
    return int(text)


def _alpha(ours: MappingType[str, str]) -> float:
    from slurm_arnold.placement.engine import check_alpha

    if "alpha" in ours:
        try:
            return check_alpha(float(ours["alpha"]))
        except ValueError:
            raise ArnoldError(f"#ARNOLD --alpha {ours['alpha']!r} is not a number") from None
    # --align auto without a model: the same rule as arnold-sbatch's (pipelines first).
    return 0.25 if ours.get("align") == "auto" else 0.5


def wanted_from_spec(config: SiteConfig, job: StartingJob) -> Wanted | None:
    """What arnold-sbatch recorded for the job, or None when it did not place it."""
    from slurm_arnold.submit.spec import BadSpec, read_spec

    try:
        spec = read_spec(config, job.user, job.uid, job.job_id)
    except BadSpec as exc:
        log.warning("job %d: %s; its spec is ignored", job.job_id, exc)
        return None
    if spec is None:
        return None
    own = config.users_dir / job.user / "rankorder" / f"{spec.placement_id}.rankorder"
    return Wanted("arnold-sbatch", spec.tp, spec.pp, spec.dp, spec.gpus_per_node, spec.alpha,
                  spec.rank_order, own, spec.cp, spec.ep, spec.nvlink)


def rankfile_entries(path: Path, uid: int | None = None) -> list[RankEntry] | None:
    """The ranks of a rank file, or None when it is missing, unreadable, not a rank file,
    or (with ``uid``) not owned by ``uid`` or root, or writable by others: the same trust the
    plugin asks for."""
    from slurm_arnold.rankorder import parse

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if uid is not None and (info.st_uid not in (uid, 0) or info.st_mode & 0o022):
            return None
        data = fh.read(RANKFILE_LIMIT + 1)
    if len(data) > RANKFILE_LIMIT:
        return None
    try:
        _, entries = parse(data.decode())
    except (ArnoldError, UnicodeDecodeError, ValueError):
        return None
    return entries


def rankfile_nodes(path: Path, uid: int | None = None) -> set[str] | None:
    """The nodes a rank file gives ranks to (None as ``rankfile_entries``)."""
    entries = rankfile_entries(path, uid)
    return None if entries is None else {e.node for e in entries}


def admin_rankfile(config: SiteConfig, job_id: int) -> Path:
    """Where the admin side's rank file for ``job_id`` goes (the plugin's ``rankdir``)."""
    from slurm_arnold.site_state import admin_rankdir

    return admin_rankdir(config) / f"{job_id}.rankorder"


@dataclass(frozen=True)
class Outcome:
    """What the prolog did for one job (``kind`` is ``none``, ``kept`` or ``mapped``)."""

    kind: str
    message: str
    rankfile: Path | None = None
    seconds: float = 0.0


def prolog(config: SiteConfig, env: MappingType[str, str], *,
           started: float | None = None) -> Outcome:
    """Make the rank file of the starting job (see the module docstring). ``started``: the
    ``time.monotonic()`` the process started at, so that the time recorded is what slurmctld
    waited (interpreter and imports included); default now."""
    t0 = time.monotonic() if started is None else started
    job = starting_job(env)
    outcome = _outcome(config, job, t0)
    if outcome.kind != "none":
        # A job that wants none of our ranks is answered without the database (sqlite-utils
        # and numpy cost a plain job's start a fifth of a second).
        _record_run(config, job, outcome.kind, time.monotonic() - t0)
    return outcome


def _outcome(config: SiteConfig, job: StartingJob, t0: float) -> Outcome:
    from slurm_arnold.slurm import Slurm

    slurm = Slurm()
    wanted = wanted_from_spec(config, job)
    script = slurm.batch_script(job.job_id, SCRIPT_LIMIT) if wanted is None else None
    if wanted is None and script is not None:
        try:
            wanted = wanted_from_script(script)
        except ArnoldError as exc:
            return Outcome("none", f"job {job.job_id}: {exc}; no ranks of ours")
    if wanted is None:
        return Outcome("none", f"job {job.job_id}: asks for no ranks of ours")
    allocation = set(job.nodes)
    admin = admin_rankfile(config, job.job_id)
    admin_nodes = rankfile_nodes(admin)
    if admin_nodes == allocation:
        return Outcome("kept", f"job {job.job_id}: the admin side's rank file is for its nodes",
                       admin, time.monotonic() - t0)
    if admin_nodes is None and wanted.user_rankfile is not None and \
            rankfile_nodes(wanted.user_rankfile, job.uid) == allocation:
        return Outcome("kept", f"job {job.job_id}: starts on its planned nodes",
                       wanted.user_rankfile, time.monotonic() - t0)
    planned = admin_nodes or (rankfile_nodes(wanted.user_rankfile, job.uid)
                              if wanted.user_rankfile is not None else None)
    return _map(config, slurm, job, wanted, admin, t0, sorted(planned or ()))


def _map(config: SiteConfig, slurm: Slurm, job: StartingJob, wanted: Wanted, admin: Path,
         t0: float, planned: list[str]) -> Outcome:
    from slurm_arnold.placement.mapping import map_allocation
    from slurm_arnold.rankorder import write_files
    from slurm_arnold.site_state import SITE_DIR_MODE, make_dir
    from slurm_arnold.snapshot.live import live_cluster

    view = live_cluster(slurm, minipod_level=config.minipod_level, partition=job.partition)
    gpus = wanted.gpus_per_node or _gpus_per_node(slurm, job, view.common_gpus(job.nodes))
    try:
        par = Parallelism.sized(wanted.tp, wanted.pp, None, len(job.nodes), gpus, cp=wanted.cp,
                                ep=wanted.ep, nvlink=wanted.nvlink)
        if wanted.dp is not None and wanted.dp != par.dp:
            raise InfeasibleError(f"--dp {wanted.dp} but {len(job.nodes)} nodes of {gpus} GPUs "
                                  f"make DP {par.dp}")
        mapping = map_allocation(view.topology, list(job.nodes), par.shape(gpus),
                                 alpha=wanted.alpha)
        make_dir(admin.parent, SITE_DIR_MODE)
        rankfile, _ = write_files(admin.parent, mapping.chosen, secrets.token_hex(8),
                                  wanted.rank_order, stem=str(job.job_id), parallelism=par)
    except (InfeasibleError, ArnoldError) as exc:
        return Outcome("none", f"job {job.job_id} ({wanted.source}): {exc}; no ranks of ours")
    m, d = mapping.chosen.metrics, mapping.default.metrics
    message = (f"job {job.job_id} ({wanted.source}): mapped on its {len(job.nodes)} nodes, "
               f"spreads dp {m.max_dp_spread} pp {m.max_pp_spread} (Slurm's order: dp "
               f"{d.max_dp_spread} pp {d.max_pp_spread})"
               + (f"; {mapping.note}" if mapping.note else ""))
    outcome = Outcome("mapped", message, rankfile, time.monotonic() - t0)
    _record(config, job, planned, mapping.chosen.metrics.weighted_spread,
            mapping.default.metrics.weighted_spread, outcome)
    return outcome


def _gpus_per_node(slurm: Slurm, job: StartingJob, fallback: int) -> int:
    """The job's GPUs per node from what Slurm allocated (a job may use part of each node)."""
    info = slurm.job(job.job_id)
    if info is not None and info.gpus and info.gpus % len(job.nodes) == 0:
        return info.gpus // len(job.nodes)
    return fallback


def _record_run(config: SiteConfig, job: StartingJob, outcome: str, seconds: float) -> None:
    """A ``prolog_runs`` row: what the prolog did for the job and how long slurmctld waited
    for it. Where the site database is not writable by the account slurmctld runs the prolog
    as, nothing (the rank file is what matters; ``_record`` warns once for the job)."""
    from reservations.records import Records
    from slurm_arnold.site_state import open_site_db

    try:
        state = open_site_db(config, write=True)
    except (StateError, OSError):
        return
    try:
        Records(state).prolog_run(job.job_id, job.user, outcome, seconds, time.time())
    except (StateError, OSError) as exc:
        log.warning("job %d: prolog time not recorded (%s)", job.job_id, exc)
    finally:
        state.close()


def _record(config: SiteConfig, job: StartingJob, planned: list[str], spread: float,
            previous: float, outcome: Outcome) -> None:
    """A ``bindings`` row of kind ``start``: the nodes it was planned on (none for a plain
    sbatch job), and its weighted spread beside that of Slurm's order on the same nodes
    (``previous_spread``). Where the site database is not writable by the account slurmctld
    runs the prolog as, a warning (the rank file is what matters)."""
    from reservations.records import Records
    from slurm_arnold.site_state import open_site_db

    try:
        state = open_site_db(config, write=True)
    except (StateError, OSError) as exc:
        log.warning("job %d: not recorded in the site database (%s)", job.job_id, exc)
        return
    try:
        now = time.time()
        Records(state).binding(job.job_id, job.user, "start", outcome.message,
                               sorted(job.nodes), planned, weighted_spread=spread,
                               previous_spread=previous, expected_start=now, now=now,
                               rankfile=str(outcome.rankfile))
    finally:
        state.close()


def wrapper_script(config: SiteConfig, prolog: Path, slurm_conf: Path | None,
                   slurm_bin: Path | None = None) -> str:
    """The ``PrologSlurmctld`` program for this site: a shell script that gives
    ``arnold-prolog`` what slurmctld does not (``PATH``, ``SLURM_CONF``) and answers for most
    jobs without starting Python at all (a tenth of a second of the controller's CPU per job
    otherwise). A job goes on to ``arnold-prolog`` only when it may want our ranks: arnold-sbatch
    left its spec, or its script has an ``#ARNOLD`` line anywhere (a superset of what
    ``wanted_from_script`` reads, which decides). Paths come from the site config, so the
    script is rewritten (``arnold site prolog-script``) when ``state_dir``/``jobs_dir`` move.
    ``slurm_bin``: where this Slurm's commands are, when not in /usr/bin (put first on PATH)."""
    import shlex

    users = shlex.quote(str(config.users_dir))
    conf = f"SLURM_CONF={shlex.quote(str(slurm_conf))}\nexport SLURM_CONF\n" if slurm_conf \
        else ""
    path = shlex.quote(f"{slurm_bin}:/usr/bin:/bin" if slurm_bin else "/usr/bin:/bin")
    return f"""#!/bin/sh
# slurmctld's PrologSlurmctld for slurm-arnold (written by `arnold site prolog-script`).
# It always exits 0: a failing PrologSlurmctld requeues the job.
PATH={path}
export PATH
{conf}case "$SLURM_JOB_ID$SLURM_JOB_USER" in *[!A-Za-z0-9._-]*|"") exit 0 ;; esac
if [ ! -e {users}/"$SLURM_JOB_USER"/specs/"$SLURM_JOB_ID".json ] &&
   ! scontrol write batch_script "$SLURM_JOB_ID" - 2>/dev/null \\
     | head -c {SCRIPT_LIMIT} | grep -q '^[[:space:]]*#ARNOLD'; then
    exit 0
fi
exec {shlex.quote(str(prolog))}
"""
