"""The faults ``arnold bench site`` injects, each at a seeded moment, each with the expectation
it checks afterwards. A fault is ``inject``ed on its own thread while the stream runs, ``settle``d
once the stream is done (what it broke is put back), and ``report``s one row of the table:
fault, when, what was seen, held or not.

The daemons are killed through their PID files (slurm.conf's and slurmdbd.conf's) and started
again the way an admin of the local cluster does: ``make cluster`` (``devcluster.py up``), which
restarts only what died and keeps Slurm's state.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from slurm_arnold.errors import ArnoldError

if TYPE_CHECKING:
    from benchmarks.site import Arm, Runner, SyncPass

REPO = Path(__file__).resolve().parents[1]
DEVCLUSTER = REPO / "site_config" / "devcluster" / "devcluster.py"


def slurm_config() -> dict[str, str]:
    """``scontrol show config`` as a dict (read before any daemon is killed)."""
    proc = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ArnoldError(f"scontrol show config: {proc.stderr.strip()}")
    out = {}
    for line in proc.stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def lane() -> str:
    """The running Slurm's release as ``make cluster`` names its lanes (``22.05``)."""
    proc = subprocess.run(["sinfo", "--version"], capture_output=True, text=True)
    parts = proc.stdout.split()[-1].split(".") if proc.returncode == 0 else []
    if len(parts) < 2:
        raise ArnoldError("sinfo --version did not answer; is the cluster up?")
    return f"{int(parts[0])}.{int(parts[1]):02d}"


def restart_cluster(release: str) -> tuple[float, int, str]:
    """``make cluster`` on the running cluster: seconds, exit status, its last line."""
    if not DEVCLUSTER.exists():
        raise ArnoldError(f"{DEVCLUSTER} is missing: the site bench restarts daemons with the "
                          "checkout's `make cluster`")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, str(DEVCLUSTER), "--slurm", release, "up"],
                          capture_output=True, text=True, timeout=600)
    last = (proc.stderr.strip().splitlines() or [""])[-1]
    return time.monotonic() - t0, proc.returncode, last


def pid_of(pidfile: Path) -> int | None:
    """The PID a PID file names, if that process lives."""
    try:
        pid = int(pidfile.read_text().split()[0])
        os.kill(pid, 0)
    except (OSError, ValueError, IndexError):
        return None
    return pid


def duplicate_jobid_drains() -> list[str]:
    """Nodes drained by Slurm for a job id it handed out twice (``sinfo -R``)."""
    proc = subprocess.run(["sinfo", "-R", "-h", "-N", "-o", "%N|%E"], capture_output=True,
                          text=True)
    return sorted({line.split("|")[0] for line in proc.stdout.splitlines()
                   if "|" in line and "Duplicate jobid" in line.split("|", 1)[1]})


def _traceback(text: str) -> bool:
    return "Traceback (most recent call last)" in text


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@dataclass
class Fault:
    """One fault: ``at`` seconds into the arm; subclasses say what and check what."""

    at: float
    name: str = ""
    #: A fault that meets users' submissions must come while they arrive (``site_run``).
    during_submissions: ClassVar[bool] = False
    expectation: str = ""
    when: float | None = None
    seen: list[str] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)

    def inject(self, runner: Runner, arm: Arm) -> None:
        """Wait for the moment, then break something (on its own thread)."""
        if runner.stop.wait(self.at):
            return
        self.when = time.monotonic() - arm.started_at
        try:
            self.act(runner, arm)
        except Exception as exc:  # a fault that could not be injected is reported, not raised
            self.broken.append(f"could not inject: {exc}")

    def act(self, runner: Runner, arm: Arm) -> None:
        """Break something (subclasses)."""
        raise NotImplementedError

    def settle(self, runner: Runner, arm: Arm) -> None:
        """After the stream: put back what is still broken and check the expectation."""

    def report(self) -> dict[str, Any]:
        """The table's row."""
        return {"fault": self.name, "when_s": None if self.when is None else round(self.when),
                "expectation": self.expectation,
                "seen": "; ".join(self.seen) or "-",
                "held": self.when is not None and not self.broken,
                "broken": self.broken}

    def passes_after(self, arm: Arm, since: float, until: float | None = None) -> list[SyncPass]:
        """The arm's sync passes that started after ``since`` (and before ``until``)."""
        return [p for p in arm.passes if p.at - p.seconds >= since
                and (until is None or p.at - p.seconds < until) and not p.killed]

    def judge_passes(self, arm: Arm, down_from: float, down_to: float, what: str) -> None:
        """The rule for every fault the admin loop meets: no traceback, at most one line on
        stderr per pass while ``what`` is down, and the first pass after it exits 0."""
        during = self.passes_after(arm, down_from, down_to)
        after = self.passes_after(arm, down_to)
        for p in during + after:
            if _traceback(p.stderr):
                self.broken.append(f"a pass at {p.at:.0f} s wrote a traceback")
            elif len(_lines(p.stderr)) > 1:
                self.broken.append(f"a pass at {p.at:.0f} s wrote {len(_lines(p.stderr))} lines")
        said = sorted({_lines(p.stderr)[0] for p in during if _lines(p.stderr)})
        if said:
            self.seen.append(f"{len(during)} passes while {what} was down said: {said[0]!r}")
        else:
            self.seen.append(f"{len(during)} passes while {what} was down")
        if not after:
            self.broken.append(f"no pass ran after {what} came back")
        elif after[0].returncode != 0:
            self.broken.append(f"the first pass after {what} came back exited "
                               f"{after[0].returncode}: {_lines(after[0].stderr)[:1]}")
        else:
            self.seen.append(f"next pass reconciled in {after[0].seconds:.1f} s")


@dataclass
class SlurmctldKill(Fault):
    """slurmctld SIGKILLed, restarted ``down_s`` later with ``make cluster``; with
    ``during_sync``, killed while a sync pass runs."""

    down_s: float = 60.0
    during_sync: bool = False
    pidfile: Path = Path()
    release: str = ""
    back: float | None = None

    def __post_init__(self) -> None:
        self.name = "slurmctld SIGKILL" + (" during a sync pass" if self.during_sync else "")
        self.expectation = (f"restarted {self.down_s:.0f} s later by `make cluster` within 60 s; "
                            "passes: no traceback, one line, the next reconciles")
        self.pidfile = Path(slurm_config().get("SlurmctldPidFile", ""))
        self.release = lane()

    def act(self, runner: Runner, arm: Arm) -> None:
        if self.during_sync:
            until = time.monotonic() + 120
            while runner.sync_proc is None and time.monotonic() < until:
                time.sleep(0.05)
            time.sleep(0.3)  # into the pass, past its start-up
        pid = pid_of(self.pidfile)
        if pid is None:
            raise ArnoldError(f"no live slurmctld in {self.pidfile}")
        os.kill(pid, signal.SIGKILL)
        self.when = time.monotonic() - arm.started_at
        self.seen.append("killed" + (" during a pass" if runner.sync_proc is not None else ""))
        time.sleep(self.down_s)
        took, rc, last = restart_cluster(self.release)
        self.back = time.monotonic() - arm.started_at
        self.seen.append(f"`make cluster` took {took:.0f} s")
        if rc != 0:
            self.broken.append(f"`make cluster` failed: {last}")
        elif took > 60:
            self.broken.append(f"`make cluster` took {took:.0f} s (over 60 s)")
        if pid_of(self.pidfile) is None:
            self.broken.append("slurmctld is not running after `make cluster`")

    def settle(self, runner: Runner, arm: Arm) -> None:
        if self.when is None or self.back is None:
            return
        self.judge_passes(arm, self.when, self.back, "slurmctld")
        # What a SIGKILL loses: the jobs submitted since slurmctld last saved its state. The
        # next one hands their ids out again, and a slurmd still running a job of that id
        # drains its node ("Duplicate jobid"). The admin resumes them; so does the bench.
        drained = duplicate_jobid_drains()
        if drained:
            subprocess.run(["scontrol", "update", f"nodename={','.join(drained)}",
                            "state=resume"], capture_output=True)
            self.seen.append(f"Slurm drained {len(drained)} nodes (job ids handed out again "
                             "after the kill: Duplicate jobid); resumed at the end")


def flock_holders(path: Path) -> list[int]:
    """The processes holding a ``flock`` on ``path`` (``/proc/locks``; waiters left out)."""
    try:
        inode = path.stat().st_ino
        text = Path("/proc/locks").read_text()
    except OSError:
        return []
    holders = []
    for line in text.splitlines():
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (a blocked waiter has "->")
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[4].isdigit() \
                and parts[5].rsplit(":", 1)[-1] == str(inode):
            holders.append(int(parts[4]))
    return holders


def holds_flock(pid: int, path: Path) -> bool:
    """Whether process ``pid`` holds a ``flock`` on ``path``."""
    return pid in flock_holders(path)


def is_arnold_sbatch(pid: int) -> bool:
    """Whether process ``pid`` runs arnold-sbatch (not the admin loop, which locks too)."""
    try:
        return b"bin/arnold-sbatch" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


@dataclass
class SyncKill(Fault):
    """``arnold reserve sync`` SIGKILLed mid-pass: while it holds the site lock (reading,
    deciding or writing), a random moment into it."""

    seed: int = 0
    killed_after: float | None = None

    def __post_init__(self) -> None:
        self.name = "arnold reserve sync SIGKILL mid-pass"
        self.expectation = ("the next pass exits 0 with no traceback; the lock is free; "
                            "databases intact")

    def act(self, runner: Runner, arm: Arm) -> None:
        import random

        from site_config import load_config
        from slurm_arnold.site_state import SUBMIT_LOCK

        lock = load_config().state_dir / SUBMIT_LOCK
        rng = random.Random(self.seed)
        seen: list[float] = []
        for _ in range(5):  # a pass that finishes before it is caught: try the next one

            def killer(proc: subprocess.Popen[str]) -> bool:
                t0 = time.monotonic()
                while proc.poll() is None and time.monotonic() - t0 < 120:
                    if holds_flock(proc.pid, lock):
                        time.sleep(rng.uniform(0.0, 0.3))
                        if proc.poll() is None:
                            proc.kill()
                            seen.append(time.monotonic() - t0)
                            return True
                    time.sleep(0.01)
                return False

            done = runner.sync_once(arm, killer=killer)
            if done.killed:
                self.killed_after = seen[0] if seen else None
                self.when = time.monotonic() - arm.started_at
                self.seen.append(f"killed {self.killed_after or 0:.2f} s in, holding the "
                                 "site lock")
                return
        self.broken.append("five passes ended before one could be killed holding the lock")

    def settle(self, runner: Runner, arm: Arm) -> None:
        if self.when is None or self.killed_after is None:
            return
        after = self.passes_after(arm, self.when)
        if not after:
            self.broken.append("no pass ran after the kill")
        elif _traceback(after[0].stderr) or after[0].returncode != 0:
            self.broken.append(f"the next pass exited {after[0].returncode}: "
                               f"{_lines(after[0].stderr)[:1]}")
        else:
            self.seen.append(f"next pass reconciled in {after[0].seconds:.1f} s")


@dataclass
class TwoSyncs(Fault):
    """Two ``arnold reserve sync`` started at the same moment (two admins, or cron and a
    hand): one waits for or yields to the other; neither breaks anything."""

    def __post_init__(self) -> None:
        self.name = "two syncs at once"
        self.expectation = "both exit 0 (or one says the other holds the lock), no traceback"

    def act(self, runner: Runner, arm: Arm) -> None:
        argv = [str(runner.venv / "bin" / "arnold"), "reserve", "sync"]
        procs = [subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True, env=runner.sync_env, cwd="/") for _ in range(2)]
        for proc in procs:
            _, err = proc.communicate(timeout=600)
            self.seen.append(f"exit {proc.returncode}" + (f" ({_lines(err)[0]})"
                                                          if _lines(err) else ""))
            if _traceback(err) or len(_lines(err)) > 1 or proc.returncode not in (0, 1):
                self.broken.append(f"a sync exited {proc.returncode}: {_lines(err)[:2]}")


@dataclass
class SlurmdbdStop(Fault):
    """slurmdbd stopped (SIGTERM) for ``down_s`` seconds, then ``make cluster``."""

    down_s: float = 180.0
    pidfile: Path = Path()
    release: str = ""
    back: float | None = None

    def __post_init__(self) -> None:
        self.name = f"slurmdbd stopped {self.down_s / 60:.0f} min"
        self.expectation = "passes: no traceback, one line at most, the next after reconciles"
        conf = Path(os.environ.get("SLURM_CONF", "")).with_name("slurmdbd.conf")
        found = [line.split("=", 1)[1].strip() for line in
                 (conf.read_text().splitlines() if conf.exists() else [])
                 if line.strip().lower().startswith("pidfile=")]
        self.pidfile = Path(found[0]) if found else Path()
        self.release = lane()

    def act(self, runner: Runner, arm: Arm) -> None:
        pid = pid_of(self.pidfile)
        if pid is None:
            raise ArnoldError(f"no live slurmdbd in {self.pidfile or 'slurmdbd.conf'}")
        os.kill(pid, signal.SIGTERM)
        self.seen.append("stopped")
        time.sleep(self.down_s)
        _, rc, last = restart_cluster(self.release)
        self.back = time.monotonic() - arm.started_at
        if rc != 0:
            self.broken.append(f"`make cluster` failed: {last}")

    def settle(self, runner: Runner, arm: Arm) -> None:
        if self.when is None or self.back is None:
            return
        self.judge_passes(arm, self.when, self.back, "slurmdbd")


@dataclass
class SlurmdKill(Fault):
    """The slurmd of nodes inside one of our reservations and under a running large job
    SIGKILLed (the nodes go DOWN), restarted ``down_s`` later with ``make cluster``."""

    down_s: float = 60.0
    release: str = ""
    pattern: str = ""

    def __post_init__(self) -> None:
        self.name = "slurmd killed in a reservation and under a large job"
        self.expectation = ("nodes DOWN then back; our reservation moves or waits, no job bound "
                            "to a DOWN node stays so past the next pass")
        self.pattern = slurm_config().get("SlurmdPidFile", "")
        self.release = lane()

    def act(self, runner: Runner, arm: Arm) -> None:
        from benchmarks import site_checks

        victims: list[str] = []
        until = time.monotonic() + 300
        while len(victims) < 2 and time.monotonic() < until and not runner.stop.is_set():
            victims = []
            res = {n: nodes for n, nodes in site_checks.reservations().items()
                   if n.startswith(site_checks.RESERVATION_PREFIX) and nodes}
            if res:
                victims.append(sorted(next(iter(res.values())))[0])
            running = [j for j in site_checks.queue() if j.state == "RUNNING" and
                       j.name.startswith("arnold-site-arnold-") and len(j.nodes) >= 8]
            if running:
                victims.append(sorted(running[0].nodes)[0])
            if len(victims) < 2:
                time.sleep(5)
        if not victims:
            raise ArnoldError("no reservation and no running large job to strike in 300 s")
        for node in victims:
            pid = pid_of(Path(self.pattern.replace("%n", node)))
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
        self.seen.append(f"killed the slurmd of {', '.join(victims)}")
        time.sleep(self.down_s)
        took, rc, last = restart_cluster(self.release)
        if rc != 0:
            self.broken.append(f"`make cluster` failed: {last}")
        else:
            self.seen.append(f"back by `make cluster` in {took:.0f} s")


@dataclass
class DrainResume(Fault):
    """Nodes a waiting planned job is bound to (``ReqNodeList``) drained for ``down_s``
    seconds, then resumed."""

    down_s: float = 60.0

    def __post_init__(self) -> None:
        self.name = "nodes drained and resumed under a waiting planned job"
        self.expectation = "the job is bound elsewhere or waits; nothing bound to drained nodes"

    def act(self, runner: Runner, arm: Arm) -> None:
        from benchmarks import site_checks

        target: list[str] = []
        until = time.monotonic() + 300
        while not target and time.monotonic() < until and not runner.stop.is_set():
            bound = [j for j in site_checks.queue() if j.state == "PENDING" and j.required]
            if bound:
                target = sorted(bound[0].required)[:2]
            else:
                time.sleep(5)
        if not target:
            raise ArnoldError("no waiting job bound to nodes in 300 s")
        names = ",".join(target)
        subprocess.run(["scontrol", "update", f"nodename={names}", "state=drain",
                        "reason=arnold bench site"], check=True, capture_output=True)
        self.seen.append(f"drained {names}")
        time.sleep(self.down_s)
        subprocess.run(["scontrol", "update", f"nodename={names}", "state=resume"],
                       check=False, capture_output=True)
        self.seen.append("resumed")


@dataclass
class SbatchStop(Fault):
    """An arnold-sbatch SIGSTOPped while it holds the site lock, SIGKILLed ``down_s`` later
    (a user's ^Z, a login node that hangs): everyone else waits, then goes on."""

    during_submissions: ClassVar[bool] = True
    down_s: float = 60.0
    killed: float | None = None

    def __post_init__(self) -> None:
        self.name = "arnold-sbatch SIGSTOP holding the site lock, then SIGKILL"
        self.expectation = (f"killed {self.down_s:.0f} s later; passes meanwhile: no traceback, "
                            "at most one line; the lock free at once; the next pass reconciles")

    def act(self, runner: Runner, arm: Arm) -> None:
        from site_config import load_config
        from slurm_arnold.site_state import SUBMIT_LOCK

        lock = load_config().state_dir / SUBMIT_LOCK
        until = time.monotonic() + 300
        pid = None
        # The lock is held for tens of milliseconds a submission: look often, cheaply; one
        # that let go before the signal landed is let go on (SIGCONT) and another sought.
        while pid is None and time.monotonic() < until and not runner.stop.is_set():
            pid = next((p for p in flock_holders(lock) if is_arnold_sbatch(p)), None)
            if pid is None:
                time.sleep(0.005)
                continue
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pid = None
                continue
            if not holds_flock(pid, lock):
                os.kill(pid, signal.SIGCONT)
                pid = None
        if pid is None:
            raise ArnoldError("no arnold-sbatch was seen holding the site lock")
        self.when = time.monotonic() - arm.started_at
        self.seen.append(f"stopped pid {pid} holding the lock")
        time.sleep(self.down_s)
        with_lock = holds_flock(pid, lock)
        os.kill(pid, signal.SIGKILL)
        self.killed = time.monotonic() - arm.started_at
        if not with_lock:
            self.seen.append("it no longer held the lock when killed")
        deadline = time.monotonic() + 10
        while holds_flock(pid, lock) and time.monotonic() < deadline:
            time.sleep(0.05)
        if holds_flock(pid, lock):
            self.broken.append("the lock was still held 10 s after the kill")
        else:
            self.seen.append("killed; the lock was free at once")

    def settle(self, runner: Runner, arm: Arm) -> None:
        if self.when is None or self.killed is None:
            return
        self.judge_passes(arm, self.when, self.killed, "the lock")


@dataclass
class StateFull(Fault):
    """The state directory's file system full for ``down_s`` (a file fills it, then goes):
    the admin loop's passes and users' arnold-sbatch meet SQLite's and the system's "no
    space left". Needs the state directory on a file system of its own (``make cluster`` with
    ``ARNOLD_DEV_STATE_MB``), never the host's."""

    during_submissions: ClassVar[bool] = True
    down_s: float = 60.0
    freed: float | None = None

    def __post_init__(self) -> None:
        self.name = "state directory's file system full"
        self.expectation = (f"full for {self.down_s:.0f} s; passes and arnold-sbatch meanwhile: "
                            "no traceback, at most one line; no database corrupt; the next "
                            "pass reconciles")

    def act(self, runner: Runner, arm: Arm) -> None:
        from site_config import load_config

        state = load_config().state_dir
        if not os.path.ismount(state):
            raise ArnoldError(f"{state} is not a file system of its own: start the cluster with "
                              "ARNOLD_DEV_STATE_MB=256 (filling it would fill the host's)")
        filler = state / ".arnold-bench-fill"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            filled = 0
            for size in (1 << 20, 4096, 512):  # what is left after the big writes, too
                chunk = b"\0" * size
                try:
                    while True:
                        filled += os.write(fd, chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
            self.when = time.monotonic() - arm.started_at
            self.seen.append(f"filled with {filled / 2**20:.0f} MiB")
            runner.stop.wait(self.down_s)
        finally:
            os.close(fd)
            filler.unlink()
            self.freed = time.monotonic() - arm.started_at

    def settle(self, runner: Runner, arm: Arm) -> None:
        if self.when is None or self.freed is None:
            return
        self.judge_passes(arm, self.when, self.freed, "free space")
        # A submission's try that started before the space came back (tries end within
        # 120 s, SIGKILLed ones aside).
        tries = [(t, index, err) for t, index, err in arm.failures
                 if self.when <= t <= self.freed + 120]
        # A submission also says what it says every time (a queued job's plan, a missing
        # model): the fault's part is its error, one line.
        for t, index, err in tries:
            errors = [line for line in _lines(err) if ": error: " in line]
            if _traceback(err):
                self.broken.append(f"job {index}'s submission at {t:.0f} s wrote a traceback")
            elif len(errors) != 1:
                self.broken.append(f"job {index}'s submission at {t:.0f} s wrote "
                                   f"{len(errors)} error lines: {_lines(err)[-3:]}")
        said = sorted({_lines(err)[-1] for _, _, err in tries if _lines(err)})
        self.seen.append(f"{len(tries)} submission tries failed meanwhile"
                         + (f", e.g. {said[0]!r}" if said else ""))


#: The faults by name, as ``--faults`` takes them.
KINDS = {"slurmctld": SlurmctldKill, "slurmctld-during-sync": SlurmctldKill,
         "sync": SyncKill, "two-syncs": TwoSyncs, "slurmdbd": SlurmdbdStop,
         "slurmd": SlurmdKill, "drain": DrainResume, "sbatch-stop": SbatchStop,
         "state-full": StateFull}
#: The smoke's two (``make test``) and the full run's set.
SMOKE = ("slurmctld", "sync")
FULL = ("slurmctld", "slurmctld-during-sync", "sync", "two-syncs", "slurmdbd", "slurmd", "drain",
        "sbatch-stop", "state-full")


def make(names: list[str], times: list[float], *, down_s: float) -> list[Fault]:
    """The faults ``names`` at ``times`` (one each, in order)."""
    out: list[Fault] = []
    for name, at in zip(names, times, strict=True):
        if name not in KINDS:
            raise ArnoldError(f"unknown fault {name!r}; use some of {', '.join(KINDS)}")
        if name in ("slurmctld", "slurmctld-during-sync"):
            out.append(SlurmctldKill(at, down_s=down_s,
                                     during_sync=name == "slurmctld-during-sync"))
        elif name == "slurmdbd":
            out.append(SlurmdbdStop(at, down_s=max(down_s, 180.0) if down_s >= 60 else down_s))
        elif name in ("slurmd", "drain", "sbatch-stop", "state-full"):
            out.append(KINDS[name](at, down_s=down_s))
        elif name == "sync":
            out.append(SyncKill(at, seed=int(at * 1000)))
        else:
            out.append(KINDS[name](at))
    return out
