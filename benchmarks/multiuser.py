"""Many users at once: real Unix users running the site's arnold-sbatch concurrently.

Shared by ``arnold bench sbatch`` (its multi-user row) and the live tests. Users are made with
``useradd`` (root only) and commands run as them with ``setpriv``, with only ``HOME``,
``PATH`` and ``SLURM_CONF`` set: every other setting comes from the site's ``arnold.toml``
beside ``SLURM_CONF``. The commands are the site install's (``<venv>/bin``, a venv of
Debian's ``/usr/bin/python3`` with the project installed), never the developer's ``.venv``.
"""

from __future__ import annotations

import os
import pwd
import statistics
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hostlist

from slurm_arnold.errors import ArnoldError
from slurm_arnold.slurm import Slurm, slurm_commands_dir

USERS = ("arnoldu1", "arnoldu2", "arnoldu3")


def site_venv() -> Path:
    """The site install: ``$ARNOLD_SITE_VENV``, else the local cluster's (``make cluster``
    puts it at ``.devcluster/venv``, beside ``etc/slurm.conf``)."""
    explicit = os.environ.get("ARNOLD_SITE_VENV")
    if explicit:
        return Path(explicit)
    conf = os.environ.get("SLURM_CONF")
    if not conf:
        raise ArnoldError("SLURM_CONF is not set; `source devcluster.env` first")
    return Path(conf).resolve().parent.parent / "venv"


def ensure_users(names: Sequence[str] = USERS) -> list[str]:
    """Make the Unix users that are missing (``useradd -m``); root only."""
    for name in names:
        try:
            pwd.getpwnam(name)
            continue
        except KeyError:
            pass
        if os.geteuid() != 0:
            raise ArnoldError(f"user {name} does not exist and only root can make it")
        proc = subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name],
                              capture_output=True, text=True)
        if proc.returncode != 0 and "already exists" not in proc.stderr:
            raise ArnoldError(f"useradd {name}: {proc.stderr.strip()}")
    return list(names)


def home(user: str) -> Path:
    """The user's home directory."""
    return Path(pwd.getpwnam(user).pw_dir)


def as_user(user: str, argv: Sequence[str], *, umask: int | None = None,
            env: dict[str, str] | None = None) -> list[str]:
    """``argv`` run as ``user`` with a clean environment (HOME, PATH, SLURM_CONF only)."""
    # As a site's login shell would, PATH reaches the same Slurm as ours.
    commands = slurm_commands_dir()
    clean = {"HOME": str(home(user)),
             "PATH": f"{commands + ':' if commands else ''}/usr/local/bin:/usr/bin:/bin",
             "SLURM_CONF": os.environ.get("SLURM_CONF", ""), **(env or {})}
    cmd = [*argv]
    if umask is not None:
        cmd = ["/bin/sh", "-c", f'umask {umask:03o} && exec "$@"', "sh", *argv]
    entry = pwd.getpwnam(user)
    # setpriv execs in place (no PAM session, no parent that mimics job control as runuser
    # does), so the pid a caller sees is the command's own.
    return ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--init-groups",
            "--", "env", "-i", *(f"{k}={v}" for k, v in clean.items()), *cmd]


@dataclass
class Submission:
    """One command run as one user, and what came of it."""

    user: str
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def job_id(self) -> int | None:
        """The job id sbatch printed (``--parsable``), if any."""
        text = self.stdout.strip().split(";")[0]
        return int(text) if self.returncode == 0 and text.isdigit() else None


def run_at_once(commands: Sequence[tuple[str, list[str]]], *, cwd: str = "/",
                timeout: float = 300.0) -> list[Submission]:
    """Start every ``(user, command)`` at the same moment; wait for all; each one's result and
    wall time (from the common start)."""
    results: list[Submission | None] = [None] * len(commands)
    start = threading.Barrier(len(commands))

    def one(i: int, user: str, cmd: list[str]) -> None:
        start.wait()
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=timeout)
        results[i] = Submission(user, proc.returncode, proc.stdout, proc.stderr,
                                time.perf_counter() - t0)

    threads = [threading.Thread(target=one, args=(i, u, c)) for i, (u, c) in
               enumerate(commands)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [r for r in results if r is not None]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0-1) by the nearest-rank rule."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q * len(ordered) + 0.5)))
    return ordered[rank - 1]


def overlapping(slurm: Slurm, job_ids: Sequence[int]) -> list[tuple[int, int, set[str]]]:
    """Pairs of the jobs whose node lists (required or allocated) share nodes."""
    jobs = {j.job_id: j for j in slurm.jobs() if j.job_id in set(job_ids)}
    nodes = {i: set(j.nodes) | set(j.required_nodes) for i, j in jobs.items()}
    ids = sorted(nodes)
    return [(a, b, nodes[a] & nodes[b]) for k, a in enumerate(ids) for b in ids[k + 1:]
            if nodes[a] & nodes[b]]


def bench(per_user: int = 5, nodes: int = 4, users: Sequence[str] = USERS,
          rounds: int = 1, env: dict[str, str] | None = None,
          venv: Path | None = None) -> dict[str, Any]:
    """``rounds`` bursts of ``len(users) x per_user`` held arnold-sbatch submissions at once
    (TP 8 x PP 2 on ``nodes`` nodes each), each cancelled before the next: latency p50/p95 over
    all of them, the worst burst's p95 (what the target is judged on, so one quiet burst cannot
    pass it), and whether any two jobs of a burst shared a node. ``env``: settings added to
    each user's clean environment (e.g. ``ARNOLD_SLURM__BACKEND``); ``venv``: another install
    to run instead of the site's (``arnold bench sbatch --against``)."""
    slurm = Slurm()
    venv = venv or site_venv()
    ensure_users(users)
    argv = [str(venv / "bin" / "arnold-sbatch"), "--parsable", "--hold", "-N", str(nodes),
            "--ntasks-per-node=8", "--gpus-per-node=8", "--exclusive", "-t", "5",
            "-o", "/dev/null", "--tp", "8", "--pp", "2", "--wrap", "true"]
    seconds: list[float] = []
    burst_p95: list[float] = []
    shared: list[tuple[int, int, set[str]]] = []
    failed: list[Submission] = []
    submitted = 0
    for _ in range(rounds):
        results = run_at_once([(u, as_user(u, argv, env=env)) for u in users
                               for _ in range(per_user)])
        ids = [r.job_id for r in results if r.job_id is not None]
        try:
            shared += overlapping(slurm, ids)
        finally:
            for job_id in ids:
                slurm.cancel(job_id)
        submitted += len(ids)
        failed += [r for r in results if r.job_id is None]
        seconds += [r.seconds for r in results]
        burst_p95.append(percentile([r.seconds for r in results], 0.95))
    worst = max(burst_p95)
    return {"users": len(users), "per_user": per_user, "nodes_per_job": nodes,
            "rounds": rounds, "submitted": submitted, "failed": len(failed),
            "first_failure": failed[0].stderr.strip() if failed else None,
            "p50_s": round(statistics.median(seconds), 3),
            "p95_s": round(percentile(seconds, 0.95), 3), "max_s": round(max(seconds), 3),
            "worst_burst_p95_s": round(worst, 3),
            "shared_node_pairs": [(a, b, hostlist.collect_hostlist(sorted(n)))
                                  for a, b, n in shared],
            "target_met": worst <= 5.0 and not shared and not failed}
