"""The site-wide submit lock between processes (flock is per open file, so each party is a
process of its own, as each arnold-sbatch is): the admin loop (``first``) goes ahead of every
submission already waiting; a submission that cannot get the lock in time says so in one
line."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from site_config import load_config
from slurm_arnold.errors import ArnoldError
from slurm_arnold.site_state import SUBMIT_GATE, init_site, site_lock

HOLD = """
import sys, time
from site_config import load_config
from slurm_arnold.site_state import site_lock
config = load_config({{"state_dir": sys.argv[1]}})
with site_lock(config, first={first}):
    print(f"{{time.time():.6f}}", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def _holder(state: Path, hold_s: float, *, first: bool = False) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", HOLD.format(first=first), str(state),
                             str(hold_s)], stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[1])


def _waiting_on(state: Path) -> int:
    """Processes blocked on a lock of ``state`` (from /proc/locks: "->" lines wait)."""
    inodes = {str(p.stat().st_ino) for p in state.iterdir() if p.suffix in (".lock", ".gate")}
    lines = Path("/proc/locks").read_text().splitlines()
    return sum(1 for line in lines if "->" in line and line.split()[-3].split(":")[-1] in inodes)


def test_the_admin_loop_goes_ahead_of_every_submission_waiting(tmp_path: Path) -> None:
    state = tmp_path / "state"
    init_site(load_config({"state_dir": str(state)}))
    assert (state / SUBMIT_GATE).exists()
    holder = _holder(state, 3.0)
    assert holder.stdout is not None
    holder.stdout.readline()  # it holds the lock
    waiters = [_holder(state, 0.5) for _ in range(4)]
    deadline = time.monotonic() + 20
    while _waiting_on(state) < 4:
        assert time.monotonic() < deadline, "the submissions did not queue for the lock"
        time.sleep(0.05)
    loop = _holder(state, 0.5, first=True)
    outs = [p.communicate(timeout=60)[0] for p in (holder, loop, *waiters)]
    loop_at = float(outs[1].split()[0])
    waiters_at = sorted(float(o.split()[0]) for o in outs[2:])
    # Without the gate the loop would be one of five woken in no order (first 1 time in 5).
    assert loop_at < waiters_at[0], (loop_at, waiters_at)


def test_a_submission_that_waits_too_long_says_so(tmp_path: Path) -> None:
    state = tmp_path / "state"
    config = load_config({"state_dir": str(state), "lock_timeout_s": 0.5})
    init_site(config)
    holder = _holder(state, 3.0)
    assert holder.stdout is not None
    holder.stdout.readline()
    try:
        with pytest.raises(ArnoldError, match="held the site's submit lock for 0 s; try again"), \
                site_lock(config):
            pass
    finally:
        holder.communicate(timeout=30)
    with site_lock(config, first=True):
        pass  # free again, the gate open
