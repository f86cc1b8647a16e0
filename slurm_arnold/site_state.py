"""Where arnold keeps its state on disk, with which modes, and who may write what.

Two kinds of state (docs/site.md):

* **The site's** (``state_dir``, e.g. ``/var/lib/slurm-arnold``, owned by the admin account):
  reservations, admission decisions, the job history and the serving model, written only by
  the admin side (``arnold reserve sync``, ``arnold predictor retrain``, ``arnold site init``)
  and readable by every user, whose submissions read them. It also holds the site-wide submit
  lock, which any user may take.
* **Each user's** (``<jobs_dir>/<user>/``, ``jobs_dir`` defaulting to ``<state_dir>/jobs``):
  the placements and rank files that user's arnold-sbatch wrote. The parent is sticky and
  world-writable but not listable (mode 1733, like ``/var/spool/cron/crontabs``): anyone may
  make their own directory there, nobody may rename, delete or list anyone else's. Each user's
  directory is theirs (0755, checked on every use: a directory someone else made under our
  name is refused), so its files are readable by the admin side and by the SPANK plugin
  running as the job's user, and changeable by nobody else. Kept beside the site's state
  rather than in home directories so the admin side finds every user's records in one
  place; it must be on a file system the compute nodes see (the plugin reads rank files
  there).

Every file and directory is made with an explicit mode (``chmod`` after creation), so nothing
depends on the caller's umask.
"""

from __future__ import annotations

import errno
import fcntl
import os
import pwd
import signal
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from site_config import SiteConfig
from slurm_arnold.errors import ArnoldError, StateError
from slurm_arnold.state import DB_FILE_MODE, StateDB

SITE_DIR_MODE = 0o755
USERS_DIR_MODE = 0o1733
USER_DIR_MODE = 0o755
FILE_MODE = 0o644
LOCK_FILE_MODE = 0o644  # flock needs only a read-only descriptor: users never write it
SUBMIT_LOCK = "submit.lock"
#: Closed (flock LOCK_EX) by the admin loop while it waits for the submit lock: a submission
#: that gets the lock meanwhile hands it back and waits here (``site_lock``).
SUBMIT_GATE = "submit.gate"
#: How long the admin loop waits to close the gate (another loop may hold it, or a user may
#: hold it shared on purpose) before it queues for the lock like everyone else.
GATE_WAIT_S = 5.0
RANKDIR = "rankorder"
INIT_HINT = "an admin runs `arnold site init` (docs/site.md)"


class SiteNotReady(StateError):
    """The site's directories are missing and the caller may not make them."""


def caller() -> str:
    """The calling user's name, from the uid (``$USER`` is whatever the caller sets)."""
    return pwd.getpwuid(os.geteuid()).pw_name


def make_dir(path: Path, mode: int) -> bool:
    """Make ``path`` (and missing parents, 0755) with exactly ``mode``; return whether it was
    made. An existing directory is left as it is."""
    if path.is_dir():
        return False
    if not path.parent.is_dir():
        make_dir(path.parent, SITE_DIR_MODE)
    try:
        path.mkdir()
    except FileExistsError:
        return False
    os.chmod(path, mode)
    return True


def _fix_mode(path: Path, mode: int, actions: list[str]) -> None:
    current = stat.S_IMODE(path.stat().st_mode)
    if current != mode:
        os.chmod(path, mode)
        actions.append(f"{path}: mode {current:o} -> {mode:o}")


def model_dir(config: SiteConfig) -> Path:
    """Where the serving model lives: ``predictor.model_dir`` or ``<state_dir>/model``."""
    return config.predictor.model_dir or config.state_dir / "model"


def last_retrain_path(config: SiteConfig) -> Path:
    """Where the last ``retrain``'s outcome is kept (``arnold report`` shows it)."""
    return config.state_dir / "predictor-last-retrain.json"


def init_site(config: SiteConfig) -> list[str]:
    """Create (or repair) the site's directories, lock file and database with their modes;
    idempotent. Run by the admin account that runs ``arnold reserve sync``."""
    actions: list[str] = []
    for path, mode in ((config.state_dir, SITE_DIR_MODE), (config.users_dir, USERS_DIR_MODE),
                       (model_dir(config), SITE_DIR_MODE), (admin_rankdir(config), SITE_DIR_MODE)):
        try:
            if make_dir(path, mode):
                actions.append(f"made {path} (mode {mode:o})")
            else:
                _fix_mode(path, mode, actions)
        except OSError as exc:
            raise StateError(f"{path}: cannot make the directory ({exc.strerror}); run "
                             "`arnold site init` as the admin account that owns it") from None
    for lock in (config.state_dir / SUBMIT_LOCK, config.state_dir / SUBMIT_GATE):
        if not lock.exists():
            os.close(os.open(lock, os.O_RDONLY | os.O_CREAT, LOCK_FILE_MODE))
            actions.append(f"made {lock}")
        _fix_mode(lock, LOCK_FILE_MODE, actions)
    made = not config.db_path.exists()
    open_site_db(config, write=True).close()
    if made:
        actions.append(f"made {config.db_path}")
    _fix_mode(config.db_path, DB_FILE_MODE, actions)
    return actions


def admin_rankdir(config: SiteConfig) -> Path:
    """The admin side's rank files (``<state_dir>/rankorder/<job id>.rankorder``): jobs placed
    again after submission. plugstack.conf names it to the SPANK plugin (``rankdir=``)."""
    return config.state_dir / RANKDIR


def open_site_db(config: SiteConfig, *, write: bool = False) -> StateDB:
    """The site's database: opened for writing by whoever may write it (the admin side, or the
    only user of a single-user set-up), read-only by everyone else. ``write=True`` insists on
    writing (an admin verb) and fails with one line naming who may."""
    path = config.db_path
    can_write = os.access(path, os.W_OK) if path.exists() else \
        os.access(_existing_parent(path), os.W_OK)
    if write or can_write:
        if not can_write:
            raise StateError(f"{path}: cannot write the site's state as {caller()}; it is "
                             "written by the admin side only (root, SlurmUser or "
                             "reservation.admins)")
        return StateDB(path, journal="delete")
    if not path.exists():
        raise SiteNotReady(f"{path}: the site's state database does not exist; {INIT_HINT}")
    return StateDB(path, journal="delete", readonly=True)


def _existing_parent(path: Path) -> Path:
    for parent in path.parents:
        if parent.exists():
            return parent
    return Path("/")


def user_dir(config: SiteConfig) -> Path:
    """The caller's own directory (made on first use, 0755), checked to be theirs and
    writable by nobody else. Raises ``StateError`` naming the problem and the fix."""
    parent = config.users_dir
    if not parent.is_dir():
        try:
            make_dir(parent, USERS_DIR_MODE)
        except OSError:
            raise SiteNotReady(f"{parent}: the users' directory does not exist and "
                               f"{caller()} may not make it; {INIT_HINT}") from None
    own = parent / caller()
    try:
        make_dir(own, USER_DIR_MODE)
        info = own.lstat()
    except OSError as exc:
        raise SiteNotReady(f"{own}: cannot make your directory ({exc.strerror}); {INIT_HINT} "
                           f"(it sets {parent} to mode {USERS_DIR_MODE:o})") from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        owner = _user_name(info.st_uid)
        raise StateError(f"{own} belongs to {owner}, not to you ({caller()}); arnold will not "
                         "write your placements there: ask an admin to remove it")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise StateError(f"{own} is writable by others (mode {stat.S_IMODE(info.st_mode):o}); "
                         f"run `chmod {USER_DIR_MODE:o} {own}`")
    return own


def user_subdir(config: SiteConfig, name: str) -> Path:
    """A directory inside the caller's own (``rankorder``, ``explain``), 0755."""
    path = user_dir(config) / name
    make_dir(path, USER_DIR_MODE)
    return path


def open_user_db(config: SiteConfig) -> StateDB:
    """The caller's own database (their arnold-sbatch placements), with a rollback journal:
    it lives in ``jobs_dir``, which other hosts share (``slurm_arnold.state``)."""
    return StateDB(user_dir(config) / "arnold.db", journal="delete")


def user_db_path(config: SiteConfig, user: str) -> Path:
    """Where ``user``'s own database is (for readers such as the admin side)."""
    return config.users_dir / user / "arnold.db"


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


class _LockTimeout(Exception):
    pass


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    raise _LockTimeout


def site_lock_busy(config: SiteConfig) -> bool:
    """Whether another submission holds the site-wide submit lock right now (a hint: it may
    be taken or let go the moment after; False where the lock cannot be opened)."""
    try:
        fd = os.open(config.state_dir / SUBMIT_LOCK, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


@contextmanager
def site_lock(config: SiteConfig, *, first: bool = False) -> Iterator[int]:
    """The site-wide submit lock (``flock`` on ``<state_dir>/submit.lock``), held around
    reading the cluster, solving and submitting, by every user's arnold-sbatch. The kernel
    releases it when its holder dies, even by ``kill -9``. Waits at most
    ``lock_timeout_s``; yields the descriptor (the caller may release it early).

    ``first`` (the admin loop) goes ahead of the submissions waiting: it closes the gate
    (``submit.gate``) while it waits, and a submission that gets the lock then hands it back
    and waits at the gate, so the loop waits for the one holder, not for the queue behind it
    (``flock`` wakes its waiters in no order: behind 20 users it waited 25 to 50 s)."""
    path = config.state_dir / SUBMIT_LOCK
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        try:  # a single-user set-up makes its own lock
            make_dir(config.state_dir, SITE_DIR_MODE)
            fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, LOCK_FILE_MODE)
            os.fchmod(fd, LOCK_FILE_MODE)
        except OSError:
            raise SiteNotReady(f"{path}: the site's submit lock does not exist; "
                               f"{INIT_HINT}") from None
    except OSError as exc:
        raise StateError(f"{path}: cannot open the site's submit lock ({exc.strerror}); "
                         f"{INIT_HINT}") from None
    try:
        gate = _open_gate(config, make=first)
        try:
            if first:
                if gate is not None and not _flock(gate, fcntl.LOCK_EX,
                                                   min(GATE_WAIT_S, config.lock_timeout_s)):
                    os.close(gate)
                    gate = None
                _acquire(fd, path, config.lock_timeout_s)
            else:
                _acquire_behind_gate(fd, path, gate, config.lock_timeout_s)
        finally:
            if gate is not None:
                os.close(gate)  # opens the gate (the loop holds the lock now)
        yield fd
    finally:
        os.close(fd)  # releases the lock if still held


def _open_gate(config: SiteConfig, *, make: bool) -> int | None:
    """The gate's descriptor; None where it does not exist (a site made before it: then
    nobody goes first) and ``make`` (the admin loop, who owns the state directory) cannot
    make it."""
    path = config.state_dir / SUBMIT_GATE
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC | (os.O_CREAT if make else 0),
                       LOCK_FILE_MODE)
    except OSError:
        return None


def _acquire_behind_gate(fd: int, path: Path, gate: int | None, timeout_s: float) -> None:
    """The lock, handed back each time the gate is found closed (the admin loop waits)."""
    deadline = time.monotonic() + timeout_s
    while True:
        _acquire(fd, path, max(0.001, deadline - time.monotonic()))
        if gate is None or _flock(gate, fcntl.LOCK_SH, 0.0):
            if gate is not None:
                fcntl.flock(gate, fcntl.LOCK_UN)
            return
        fcntl.flock(fd, fcntl.LOCK_UN)
        if not _flock(gate, fcntl.LOCK_SH, max(0.001, deadline - time.monotonic())):
            raise _timeout(path, timeout_s)
        fcntl.flock(gate, fcntl.LOCK_UN)


def _flock(fd: int, op: int, timeout_s: float) -> bool:
    """``flock(fd, op)`` waiting at most ``timeout_s`` (0: not at all); whether it was taken."""
    try:
        fcntl.flock(fd, op | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise
    if timeout_s <= 0:
        return False
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        fcntl.flock(fd, op)
        return True
    except _LockTimeout:
        return False
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _timeout(path: Path, timeout_s: float) -> ArnoldError:
    return ArnoldError(f"{path}: another submission held the site's submit lock for "
                       f"{timeout_s:.0f} s; try again (lock_timeout_s sets the wait)")


def _acquire(fd: int, path: Path, timeout_s: float) -> None:
    # Waits in the kernel (woken at once when the holder lets go), bounded by an alarm.
    if not _flock(fd, fcntl.LOCK_EX, timeout_s):
        raise _timeout(path, timeout_s)
