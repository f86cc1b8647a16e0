#!/usr/bin/env python3
"""Start, stop and inspect the local development Slurm cluster.

A real Slurm (Debian's packages) with many ``slurmd -N`` daemons on one host, a fat-tree
``topology.conf``, fake GPUs, munge and slurmdbd on MariaDB for real accounting. Everything
lives under ``<repo>/.devcluster`` (config, state, logs) and a short socket directory under
``/tmp`` (unix socket paths are limited to 108 bytes). Only loopback addresses and ports of
our own are used; daemons are stopped by their PID files.

It is set up as a site would be, for every Unix user of the machine: the SPANK plugin is
installed into ``.devcluster/lib``, slurm-arnold into ``.devcluster/venv`` (made with Debian's
``/usr/bin/python3``, since a venv of a Python under ``/root`` cannot run for others), and
``arnold site init`` makes the site's state directories with their modes. When the checkout
itself is not reachable by other users (a directory above it lacks o+x), ``.devcluster`` is a
symlink to ``/var/tmp/arnold-dev-<hash>``, so the cluster's files still are.

Two lanes of Slurm, which can run side by side: Debian 12's 22.05 (the host's packages; the
default) and Debian unstable's 26.05 (``--slurm 26.05``), whose packages are installed into a
Debian unstable root made once with ``debootstrap`` (``ARNOLD_DEV_SID_ROOT``, default
``/var/cache/slurm-arnold/sid-root``) and run *on the host*: its programs are patched to use
the root's own dynamic loader and libraries (``patch_root``), linked from
``.devcluster-26.05/slurm-bin`` (first on PATH after ``source devcluster-26.05.env``) and
``.devcluster-26.05/bin``, with ``PluginDir`` pointing into the root. No chroot: jobs see the
host's files and users, and every Unix user can run the commands. Each lane has its own
directory, ports, munge key, job ids, ``arnold.toml`` and state directory.

Standard library only: it runs before the project's virtual environment exists.

A third lane, Slurm 25.11 (``--slurm 25.11``: the release most sites run, and the one pyslurm
on PyPI builds against), is built from SchedMD's release tarball (``SLURM_SOURCES``, default
``../shared/vendor`` beside the checkout) once into ``ARNOLD_DEV_SLURM_BUILD`` (default
``/var/cache/slurm-arnold/slurm-25.11``, installed under its ``usr``), rebuilt when missing.

Usage: devcluster.py [--slurm 22.05|26.05|25.11] up | down | status | root
  (the lane may also come from ARNOLD_DEV_SLURM; ``root`` makes the lane's root (26.05) or
  build (25.11) if missing and prints its path)
Size: ARNOLD_DEV_MINIPODS (4), ARNOLD_DEV_LEAVES (leaves per minipod, 4),
ARNOLD_DEV_NODES (nodes per leaf, 4), ARNOLD_DEV_GPUS (GPUs per node, 8),
ARNOLD_DEV_PORT_BASE (16800 for 22.05, 18800 for 26.05, 20800 for 25.11). On a running
cluster, a variable left unset keeps the running cluster's value (``up`` restarts what died
without resizing it); set it to resize.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Lane:
    """One Slurm version the local cluster can run: where its files live and how its
    binaries are reached."""

    version: str
    #: Appended to ``.devcluster``, ``devcluster.env`` and the socket directory.
    suffix: str
    port_base: int
    #: Debian unstable's root holding this Slurm, or None for the host's own packages.
    root: Path | None
    #: Job ids of this lane start here, so the two clusters' ids never meet.
    first_job_id: int
    #: Whether the lane adds the NVLink partition (``NVL``): topology.yaml needs Slurm 25.05+.
    nvl: bool = False
    #: Whether ``root`` holds Slurm built from SchedMD's source (``ensure_build``: installed
    #: under ``root/usr``) rather than Debian unstable's packages (``ensure_root``).
    built: bool = False


SID_ROOT = Path(os.environ.get("ARNOLD_DEV_SID_ROOT", "/var/cache/slurm-arnold/sid-root"))
BUILD_ROOT = Path(os.environ.get("ARNOLD_DEV_SLURM_BUILD", "/var/cache/slurm-arnold/slurm-25.11"))
#: Ports each lane may use from its base: the daemons below base + 1000, one slurmd per node
#: from base + 1001, so every lane can run a site-sized cluster (2,048 nodes) beside the others.
LANE_PORTS = 4000
#: The most nodes (NVLink partition included) a lane's ports hold.
MAX_NODES = LANE_PORTS - 1001
LANES = {
    "22.05": Lane("22.05", "", 16800, None, 1),
    "26.05": Lane("26.05", "-26.05", 16800 + LANE_PORTS, SID_ROOT, 2_600_001, nvl=True),
    "25.11": Lane("25.11", "-25.11", 16800 + 2 * LANE_PORTS, BUILD_ROOT, 2_511_001, nvl=True,
                  built=True),
}
#: Where the built lane's source comes from: SchedMD's release tarball (``../shared/vendor``
#: beside the checkout; a site would download it from SchedMD).
SLURM_SOURCES = Path(os.environ.get("ARNOLD_DEV_SLURM_SOURCES", REPO.parent / "shared" / "vendor"))
#: configure's options for the built lane: many slurmd on one host; no hwloc, NVML, lua or
#: PMIx (the local cluster needs none of them).
CONFIGURE_OPTIONS = ("--enable-multiple-slurmd", "--disable-debug")
#: pyslurm for the built lane, pinned: each release builds against one Slurm release only.
PYSLURM = "pyslurm==25.11.2"
#: Debian unstable's packages the 26.05 lane installs into its root (MariaDB and munged are
#: the host's: both speak the same protocols to the root's Slurm; patchelf too).
SID_PACKAGES = ("slurmctld", "slurmd", "slurmdbd", "slurm-client", "libslurm-dev", "munge")
#: Slurm's user commands, each given a wrapper in the 26.05 lane.
CLIENT_COMMANDS = ("sacct", "sacctmgr", "salloc", "sattach", "sbatch", "sbcast", "scancel",
                   "scontrol", "scrontab", "sdiag", "sinfo", "sprio", "squeue", "sreport",
                   "srun", "sshare", "sstat", "strigger")
DAEMONS = ("slurmctld", "slurmd", "slurmstepd", "slurmdbd")


def _lane_from_env() -> Lane:
    name = os.environ.get("ARNOLD_DEV_SLURM", "22.05") or "22.05"
    return LANES.get(name, LANES["22.05"])


LANE = _lane_from_env()


def _reachable_by_all(path: Path) -> bool:
    """Whether every directory from / down to ``path`` lets others through (o+x)."""
    return all(p.stat().st_mode & 0o001 for p in (path, *path.parents))


def _run_dir(lane: Lane) -> Path:
    local = REPO / f".devcluster{lane.suffix}"
    if local.is_symlink():
        return local.resolve()
    if local.exists() or _reachable_by_all(REPO):
        return local
    digest = hashlib.sha1(str(REPO).encode()).hexdigest()[:8]
    target = Path("/var/tmp") / f"arnold-dev-{digest}{lane.suffix}"
    target.mkdir(parents=True, exist_ok=True)
    local.symlink_to(target)
    return target


RUN = _run_dir(LANE)
ENV_FILE = REPO / f"devcluster{LANE.suffix}.env"


def select_lane(name: str) -> None:
    """Point this module's paths at the lane ``name`` (one of ``LANES``)."""
    global LANE, RUN, ENV_FILE
    LANE = LANES[name]
    RUN = _run_dir(LANE)
    ENV_FILE = REPO / f"devcluster{LANE.suffix}.env"


CLUSTER_NAME = "arnolddev"
#: The shape the cluster was configured with, beside its pid files.
SHAPE_FILE = "shape.json"
DB_PASSWORD = "arnold-dev-only"


@dataclass(frozen=True)
class NvlShape:
    """The NVLink partition of a lane that has one: GB200-style nodes of 4 GPUs in blocks
    (NVLink domains) of topology/block, beside the fat tree, in partition ``nvl``."""

    blocks: int = 2
    nodes_per_block: int = 4
    gpus: int = 4
    partition: str = "nvl"

    @property
    def names(self) -> list[str]:
        return [f"nvl{i + 1:02d}" for i in range(self.blocks * self.nodes_per_block)]

    def block_range(self, block: int) -> str:
        first = block * self.nodes_per_block + 1
        return f"nvl[{first:02d}-{first + self.nodes_per_block - 1:02d}]"

    @property
    def all_nodes(self) -> str:
        return f"nvl[01-{len(self.names):02d}]"


NVL = NvlShape()


def nvl_names() -> list[str]:
    """The lane's NVLink nodes (none on a lane without the partition)."""
    return NVL.names if LANE.nvl else []


class ClusterError(RuntimeError):
    """The local cluster could not be started or stopped."""


@dataclass(frozen=True)
class Shape:
    """The size of the fat tree: minipods x leaves x nodes, GPUs per node."""

    minipods: int
    leaves: int
    nodes: int
    gpus: int
    port_base: int

    @classmethod
    def from_env(cls, running: Shape | None = None) -> Shape:
        """The shape the variables ask for; ``running``'s values where they are unset."""
        base = running or cls(4, 4, 4, 8, LANE.port_base)
        keep = {"ARNOLD_DEV_MINIPODS": base.minipods, "ARNOLD_DEV_LEAVES": base.leaves,
                "ARNOLD_DEV_NODES": base.nodes, "ARNOLD_DEV_GPUS": base.gpus,
                "ARNOLD_DEV_PORT_BASE": base.port_base}

        def number(name: str, default: int) -> int:
            raw = os.environ.get(name, str(keep[name]))
            if not raw.isdigit() or int(raw) < 1:
                raise ClusterError(f"{name}={raw!r} is not a positive integer; unset it or fix it")
            return int(raw)

        shape = cls(
            number("ARNOLD_DEV_MINIPODS", 4),
            number("ARNOLD_DEV_LEAVES", 4),
            number("ARNOLD_DEV_NODES", 4),
            number("ARNOLD_DEV_GPUS", 8),
            number("ARNOLD_DEV_PORT_BASE", LANE.port_base),
        )
        if shape.node_count + len(nvl_names()) > MAX_NODES:
            raise ClusterError(
                f"ARNOLD_DEV_MINIPODS x LEAVES x NODES = {shape.node_count} nodes: more than "
                f"the {MAX_NODES} a lane's ports hold (with its NVLink partition); choose fewer")
        return shape

    @property
    def node_count(self) -> int:
        return self.minipods * self.leaves * self.nodes

    @property
    def width(self) -> int:
        return max(3, len(str(self.node_count)))

    def node(self, index: int) -> str:
        return f"n{index + 1:0{self.width}d}"

    def node_range(self, first: int, count: int) -> str:
        return f"n[{first + 1:0{self.width}d}-{first + count:0{self.width}d}]"

    @property
    def all_nodes(self) -> str:
        return self.node_range(0, self.node_count)

    @property
    def leaf_width(self) -> int:
        return max(2, len(str(self.minipods * self.leaves - 1)))


def socket_dir() -> Path:
    """A short per-checkout directory for unix sockets."""
    digest = hashlib.sha1(str(REPO).encode()).hexdigest()[:8]
    return Path("/tmp") / f"arnold-{digest}{LANE.suffix.replace('.', '')}"


def paths() -> dict[str, Path]:
    sock = socket_dir()
    return {
        "etc": RUN / "etc",
        "bin": RUN / "bin",
        "slurm_bin": RUN / "slurm-bin",
        "log": RUN / "log",
        "state": RUN / "state",
        "spool": RUN / "spool",
        "gpu": RUN / "gpu",
        "mysql": RUN / "mysql",
        "arnold": RUN / "arnold-state",
        "lib": RUN / "lib",
        "venv": RUN / "venv",
        "sock": sock,
        "munge_socket": sock / "munge.socket.2",
        "mysql_socket": sock / "mysqld.sock",
        "munge_key": RUN / "munge" / "munge.key",
    }


def topology_conf(shape: Shape) -> str:
    lines = [
        "# Fat tree of the local development cluster, written by site_config/devcluster.",
        f"# {shape.minipods} minipods x {shape.leaves} leaves x {shape.nodes} nodes"
        f" x {shape.gpus} GPUs.",
    ]
    leaf = 0
    pods = []
    for pod in range(shape.minipods):
        first_leaf = leaf
        for _ in range(shape.leaves):
            first_node = leaf * shape.nodes
            lines.append(
                f"SwitchName=leaf{leaf:0{shape.leaf_width}d} "
                f"Nodes={shape.node_range(first_node, shape.nodes)}"
            )
            leaf += 1
        w = shape.leaf_width
        lines.append(
            f"SwitchName=pod{pod} Switches=leaf[{first_leaf:0{w}d}-{leaf - 1:0{w}d}]"
        )
        pods.append(pod)
    lines.append(f"SwitchName=core Switches=pod[0-{shape.minipods - 1}]")
    return "\n".join(lines) + "\n"


def topology_yaml(shape: Shape) -> str:
    """Slurm 25.05+'s topology.yaml: the fat tree (the cluster's default) and the NVLink
    partition's blocks (its own topology, named in its PartitionName line)."""
    lines = ["# Topologies of the local development cluster, written by site_config/devcluster.",
             "---", "- topology: fabric", "  cluster_default: true", "  tree:", "    switches:"]
    for statement in topology_conf(shape).splitlines():
        if not statement.startswith("SwitchName="):
            continue
        fields = dict(token.split("=", 1) for token in statement.split())
        lines.append(f"      - switch: {fields['SwitchName']}")
        if "Switches" in fields:
            lines.append(f"        children: {fields['Switches']}")
        else:
            lines.append(f"        nodes: {fields['Nodes']}")
    lines += [f"- topology: {NVL.partition}", "  block:",
              # The second size lets a job span both blocks: the block plugin never gives a job
              # more than one block of a size it does not list.
              f"    block_sizes: [{NVL.nodes_per_block}, {NVL.nodes_per_block * NVL.blocks}]",
              "    blocks:"]
    for b in range(NVL.blocks):
        lines += [f"      - block: nvlblock{b}", f"        nodes: {NVL.block_range(b)}"]
    return "\n".join(lines) + "\n"


def slurm_conf(shape: Shape, p: dict[str, Path]) -> str:
    first_port = shape.port_base + 1000 + 1
    last_port = first_port + shape.node_count - 1
    nvl_lines = ""
    if LANE.nvl:
        nvl_first = last_port + 1
        nvl_lines = (
            f"NodeName={NVL.all_nodes} NodeAddr=127.0.0.1 "
            f"Port=[{nvl_first}-{nvl_first + len(NVL.names) - 1}] CPUs=16 RealMemory=64000 "
            f"Gres=gpu:{NVL.gpus} State=UNKNOWN\n"
            f"PartitionName={NVL.partition} Nodes={NVL.all_nodes} Topology={NVL.partition} "
            "MaxTime=INFINITE State=UP\n")
    if LANE.root is None:
        lane_lines = "SwitchType=switch/none\n"
    else:
        # 26.05 has no switch/none (no SwitchType is the same); its plugins are the root's.
        lane_lines = f"PluginDir={plugin_dir(LANE)}\n"
    return f"""# Local development cluster of slurm-arnold (written by site_config/devcluster).
ClusterName={CLUSTER_NAME}
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={shape.port_base + 17}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# cred_expire: a requeued job may start again cred_expire + 1 s after it was requeued (default
# 120 s, which would make every test of a failed node's job wait two minutes).
AuthInfo=socket={p['munge_socket']},cred_expire=10
CredType=cred/munge
StateSaveLocation={p['state']}
SlurmdSpoolDir={p['spool']}/%n
SlurmctldPidFile={RUN}/slurmctld.pid
SlurmdPidFile={RUN}/slurmd-%n.pid
SlurmctldLogFile={p['log']}/slurmctld.log
SlurmdLogFile={p['log']}/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
{lane_lines}FirstJobId={LANE.first_job_id}
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# Backfill every second at one-second resolution: `arnold bench fidelity` replays logs with
# times scaled to seconds, where Slurm's defaults (30 s, 60 s) would dominate every wait.
SchedulerParameters=bf_interval=1,bf_resolution=1
TopologyPlugin=topology/tree
SlurmdParameters=config_overrides
PlugStackConfig={p['etc']}/plugstack.conf
# Ranks for the nodes each job actually got, before its script starts (slurm_arnold/prolog.py).
PrologSlurmctld={p['etc']}/arnold-prolog
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=600
GresTypes=gpu
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={shape.port_base + 19}
AccountingStoragePass={p['munge_socket']}
AccountingStorageTRES=gres/gpu
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
NodeName={shape.all_nodes} NodeAddr=127.0.0.1 Port=[{first_port}-{last_port}] CPUs=16 \
RealMemory=64000 Gres=gpu:{shape.gpus} State=UNKNOWN
PartitionName=gpu Nodes={shape.all_nodes} Default=YES MaxTime=INFINITE State=UP
{nvl_lines}"""


def gres_conf(shape: Shape, p: dict[str, Path]) -> str:
    nvl = (f"NodeName={NVL.all_nodes} Name=gpu File={p['gpu']}/nvidia[0-{NVL.gpus - 1}]\n"
           if LANE.nvl else "")
    return (
        "AutoDetect=off\n"
        f"NodeName={shape.all_nodes} Name=gpu File={p['gpu']}/nvidia[0-{shape.gpus - 1}]\n"
        + nvl
    )


def slurmdbd_conf(shape: Shape, p: dict[str, Path]) -> str:
    plugins = "" if LANE.root is None else f"PluginDir={plugin_dir(LANE)}\n"
    return f"""# slurmdbd of the local development cluster (must stay mode 0600).
{plugins}AuthType=auth/munge
AuthInfo=socket={p['munge_socket']}
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={shape.port_base + 19}
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={shape.port_base + 6}
StorageUser=slurm
StoragePass={DB_PASSWORD}
StorageLoc=slurm_acct_db
PidFile={RUN}/slurmdbd.pid
LogFile={p['log']}/slurmdbd.log
DebugLevel=info
"""


def arnold_toml(p: dict[str, Path]) -> str:
    return f"""# Site config of the local development cluster (written by site_config/devcluster).
state_dir = "{p['arnold']}"
minipod_level = 1
"""


def write_prolog(p: dict[str, Path]) -> None:
    """slurmctld's PrologSlurmctld: the wrapper `arnold site prolog-script` makes for this
    site's config, around the site install's arnold-prolog."""
    proc = subprocess.run([str(p["venv"] / "bin" / "arnold"), "site", "prolog-script",
                           "--prolog", str(p["venv"] / "bin" / "arnold-prolog"),
                           "--slurm-conf", str(p["etc"] / "slurm.conf")],
                          env=slurm_env(p), capture_output=True, text=True)
    if proc.returncode != 0:
        raise ClusterError(f"arnold site prolog-script: {proc.stderr.strip()}")
    write_if_changed(p["etc"] / "arnold-prolog", proc.stdout, 0o755)


def write_if_changed(path: Path, text: str, mode: int = 0o644) -> bool:
    """Write ``text`` to ``path``; return whether the content changed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    old = path.read_text() if path.exists() else None
    if old != text:
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text)
        tmp.chmod(mode)
        tmp.replace(path)
    path.chmod(mode)
    return old != text


def pid_alive(pidfile: Path) -> int | None:
    """The PID recorded in ``pidfile`` if that process is still running."""
    try:
        pid = int(pidfile.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    # A daemon killed with SIGKILL stays a zombie until its parent (here often a container's
    # init that reaps late) collects it: dead all the same.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return None if stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X") else pid


def wait_for(
    what: str, check: Callable[[], bool], timeout: float = 60.0, log: Path | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    hint = f"; see {log}" if log else ""
    raise ClusterError(f"{what} did not come up within {timeout:.0f} s{hint}")


def run(cmd: list[str], env: dict[str, str] | None = None,
        cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=cwd)
    if proc.returncode != 0:
        detail = (proc.stderr.strip() or proc.stdout.strip())[-2000:]  # a build's last words
        raise ClusterError(f"{' '.join(cmd)} exited {proc.returncode}: {detail}")
    return proc


def slurm_env(p: dict[str, Path]) -> dict[str, str]:
    env = dict(os.environ)
    env["SLURM_CONF"] = str(p["etc"] / "slurm.conf")
    if LANE.root is not None:
        env["PATH"] = f"{p['slurm_bin']}:{env.get('PATH', '/usr/bin:/bin')}"
    return env


MULTIARCH = {"x86_64": ("x86_64-linux-gnu", "ld-linux-x86-64.so.2"),
             "aarch64": ("aarch64-linux-gnu", "ld-linux-aarch64.so.1")}


def _multiarch() -> tuple[str, str]:
    machine = os.uname().machine
    if machine not in MULTIARCH:
        raise ClusterError(f"Slurm from a Debian root is set up for {', '.join(MULTIARCH)}, "
                           f"not {machine}; use the host's Slurm (--slurm 22.05)")
    return MULTIARCH[machine]


def plugin_dir(lane: Lane) -> Path:
    """Where the Slurm plugins of a lane with a root are."""
    assert lane.root is not None
    if lane.built:
        return lane.root / "usr" / "lib" / "slurm"
    return lane.root / "usr" / "lib" / _multiarch()[0] / "slurm-wlm"


def root_programs(lane: Lane) -> dict[str, Path]:
    """The Slurm programs of a lane with a root, by the name each runs under (Debian names
    its daemons ``*-wlm``)."""
    assert lane.root is not None
    sbin, bin_ = lane.root / "usr" / "sbin", lane.root / "usr" / "bin"
    if lane.built:
        programs = {name: sbin / name for name in DAEMONS}
    else:
        programs = {name: sbin / f"{name}-wlm" for name in ("slurmctld", "slurmd", "slurmstepd")}
        programs["slurmdbd"] = sbin / "slurmdbd"
    programs.update({name: bin_ / name for name in CLIENT_COMMANDS})
    return programs


def patch_root(lane: Lane) -> None:
    """Make the root's Slurm run on this host, outside the root: its programs get the root's
    dynamic loader as their interpreter, and they and libslurmfull search the root's
    libraries first (DT_RPATH, which the plugins' own dependencies inherit). A loader given
    on the command line instead would not do: slurmctld executes /proc/self/exe to run its
    scripts, which would then be the bare loader."""
    if shutil.which("patchelf") is None:
        raise ClusterError("patchelf is missing; `apt-get install patchelf` "
                           f"(`make cluster SLURM={LANE.version}` installs it)")
    assert lane.root is not None
    triplet, loader = _multiarch()
    lib = lane.root / "usr" / "lib" / triplet
    search = f"{lib / 'slurm-wlm'}:{lib}"
    for program in root_programs(lane).values():
        run(["patchelf", "--set-interpreter", str(lib / loader), "--force-rpath",
             "--set-rpath", search, str(program)])
    run(["patchelf", "--force-rpath", "--set-rpath", search,
         str(lib / "slurm-wlm" / "libslurmfull.so")])


def _apt_mirror() -> str:
    """The Debian mirror this host's apt uses (debootstrap fetches unstable from it)."""
    sources = [*sorted(Path("/etc/apt").glob("sources.list*/*")), Path("/etc/apt/sources.list")]
    for source in sources:
        try:
            text = source.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            words = line.split()
            if line.startswith("URIs:") and len(words) > 1 and "security" not in words[1]:
                return words[1]
            if words[:1] == ["deb"] and len(words) > 2 and "security" not in line:
                return next(w for w in words[1:] if "://" in w)
    return "http://deb.debian.org/debian"


def ensure_root(lane: Lane) -> Path:
    """The lane's Debian unstable root with ``SID_PACKAGES``: made once (debootstrap, then
    apt inside it), rebuilt when missing or made for other packages. A built lane's root is
    ``ensure_build``'s."""
    if lane.built:
        return ensure_build(lane)
    root = lane.root
    assert root is not None
    stamp = root / ".slurm-arnold-packages"
    wanted = " ".join(SID_PACKAGES) + "\npatched to run on the host\n"
    if stamp.exists() and stamp.read_text() == wanted and \
            (root / "usr" / "sbin" / "slurmctld-wlm").exists():
        return root
    if os.geteuid() != 0:
        raise ClusterError(f"Slurm {lane.version}'s root {root} is missing; make it as root: "
                           f"`make cluster SLURM={lane.version}`")
    if shutil.which("debootstrap") is None:
        raise ClusterError("debootstrap is missing; `apt-get install debootstrap` "
                           f"(`make cluster SLURM={lane.version}` installs it)")
    building = root.with_name(root.name + ".new")
    shutil.rmtree(building, ignore_errors=True)
    building.parent.mkdir(parents=True, exist_ok=True)
    building.parent.chmod(0o755)
    print(f"devcluster: making Debian unstable's root for Slurm {lane.version} in {root} "
          "(once; about a minute)", file=sys.stderr)
    run(["debootstrap", "--variant=minbase", "sid", str(building), _apt_mirror()])
    # The registry's copy of unstable is a few weeks old: its Release file has expired.
    apt = ["chroot", str(building), "apt-get", "-q", "-o", "Acquire::Check-Valid-Until=false"]
    run([*apt, "update"])
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run([*apt, "install", "-y", "--no-install-recommends", *SID_PACKAGES], env=env)
    if root.exists():
        old = root.with_name(root.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        root.rename(old)
        shutil.rmtree(old, ignore_errors=True)
    building.rename(root)
    patch_root(lane)  # after the move: the paths it writes are the root's final ones
    stamp.write_text(wanted)
    return root


def slurm_source(lane: Lane) -> Path:
    """SchedMD's release tarball of the lane's Slurm in ``SLURM_SOURCES`` (the newest
    ``slurm-<version>.<patch>.tar.*`` there)."""
    found = sorted(SLURM_SOURCES.glob(f"slurm-{lane.version}.*.tar.*"),
                   key=lambda p: [int(x) for x in p.name.split(".")[2:3] if x.isdigit()])
    if not found:
        raise ClusterError(
            f"Slurm {lane.version}'s source is missing: put SchedMD's release tarball "
            f"(slurm-{lane.version}.N.tar.xz) in {SLURM_SOURCES} or set "
            "ARNOLD_DEV_SLURM_SOURCES to the directory that holds it")
    return found[-1]


def ensure_build(lane: Lane) -> Path:
    """The lane's Slurm built from SchedMD's source into ``root/usr`` (config in
    ``root/etc``): built once, rebuilt when missing or built from another tarball or with
    other options. About 15 minutes on two idle cores."""
    root = lane.root
    assert root is not None
    stamp = root / ".slurm-arnold-build"
    built = stamp.exists() and (root / "usr" / "sbin" / "slurmctld").exists()
    try:
        source = slurm_source(lane)
    except ClusterError:
        if built:  # the source went away after the build: the build still serves
            return root
        raise
    wanted = f"{source.name}\n{' '.join(CONFIGURE_OPTIONS)}\n"
    if built and stamp.read_text() == wanted:
        return root
    if os.geteuid() != 0:
        raise ClusterError(f"Slurm {lane.version} is not built in {root}; build it as root: "
                           f"`make cluster SLURM={lane.version}`")
    print(f"devcluster: building Slurm {lane.version} from {source.name} into {root} (once; "
          "about 15 minutes)", file=sys.stderr)
    work = root.with_name(root.name + ".src")
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)  # configure's prefix is compiled in: build in place
    work.mkdir(parents=True)
    root.parent.chmod(0o755)
    run(["tar", "-xf", str(source), "-C", str(work), "--strip-components=1"])
    run(["./configure", f"--prefix={root}/usr", f"--sysconfdir={root}/etc",
         *CONFIGURE_OPTIONS], cwd=str(work))
    run(["make", f"-j{os.cpu_count() or 1}"], cwd=str(work))
    run(["make", "install"], cwd=str(work))
    shutil.rmtree(work, ignore_errors=True)
    stamp.write_text(wanted)
    return root


def pyslurm_wheel(lane: Lane, python: Path) -> Path:
    """The ``PYSLURM`` wheel built against the lane's Slurm, cached beside the build (``python``
    builds it once: half an hour of Cython and C on this kind of machine). Its extension
    modules find the lane's libslurm by their rpath, so no loader path is needed."""
    root = ensure_build(lane)
    cache = root.with_name(root.name + ".wheels")
    stamp = cache / ".built-for"
    wanted = (root / ".slurm-arnold-build").read_text() + PYSLURM + "\n"
    found = sorted(cache.glob("pyslurm-*.whl"))
    if found and stamp.exists() and stamp.read_text() == wanted:
        return found[-1]
    print(f"devcluster: building {PYSLURM} against Slurm {lane.version} into {cache} (once; "
          "up to half an hour)", file=sys.stderr)
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    cache.chmod(0o755)
    lib = root / "usr" / "lib"
    env = dict(os.environ, SLURM_INCLUDE_DIR=str(root / "usr" / "include"),
               SLURM_LIB_DIR=str(lib), LDFLAGS=f"-Wl,-rpath,{lib}")
    run([str(python), "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-deps",
         "-w", str(cache), PYSLURM], env=env)
    found = sorted(cache.glob("pyslurm-*.whl"))
    if not found:
        raise ClusterError(f"pip built no pyslurm wheel in {cache}")
    stamp.write_text(wanted)
    return found[-1]


def check_packages() -> None:
    if LANE.root is not None:
        ensure_root(LANE)
        missing = [b for b in ("/usr/sbin/munged",) if not Path(b).exists()]
        if not (shutil.which("mariadbd") or Path("/usr/sbin/mariadbd").exists()):
            missing.append("mariadbd")
        if missing:
            raise ClusterError(f"missing {', '.join(missing)}; run `make cluster` (it installs "
                               "the Debian packages)")
        return
    missing = [
        b
        for b in ("/usr/sbin/slurmctld-wlm", "/usr/sbin/slurmd-wlm", "/usr/sbin/slurmstepd-wlm",
                  "/usr/sbin/slurmdbd", "/usr/sbin/munged", "/usr/bin/sinfo")
        if not Path(b).exists()
    ]
    if not (shutil.which("mariadbd") or Path("/usr/sbin/mariadbd").exists()):
        missing.append("mariadbd")
    if missing:
        raise ClusterError(
            f"missing {', '.join(missing)}; run `make cluster` (it installs the Debian packages)"
        )
    emulator = subprocess.run(["dpkg", "-s", "slurm-wlm-emulator"], capture_output=True)
    if emulator.returncode == 0:
        raise ClusterError(
            "slurm-wlm-emulator is installed and breaks multiple-slurmd; "
            "run `apt-get purge slurm-wlm-emulator`"
        )


def configure(shape: Shape, p: dict[str, Path]) -> bool:
    """Write every config file; return whether the Slurm config changed."""
    RUN.mkdir(parents=True, exist_ok=True)
    RUN.chmod(0o755)  # every user reads slurm.conf, the plugin and the venv below it
    for key in ("etc", "bin", "log", "state", "spool", "gpu", "lib"):
        p[key].mkdir(parents=True, exist_ok=True)
        p[key].chmod(0o755)
    p["sock"].mkdir(parents=True, exist_ok=True)
    p["sock"].chmod(0o755)
    if LANE.root is None:
        # Daemons must run under their own names: under another name Slurm drops Gres= lines.
        for name in ("slurmctld", "slurmd", "slurmstepd"):
            link = p["bin"] / name
            if not link.is_symlink():
                link.symlink_to(f"/usr/sbin/{name}-wlm")
    else:
        p["slurm_bin"].mkdir(parents=True, exist_ok=True)
        p["slurm_bin"].chmod(0o755)
        # Links to the root's programs (patched to run here), each under its own name.
        for name, program in root_programs(LANE).items():
            link = p["bin" if name in DAEMONS else "slurm_bin"] / name
            if link.is_symlink() and Path(os.readlink(link)) == program:
                continue
            link.unlink(missing_ok=True)
            link.symlink_to(program)
    for i in range(shape.gpus):
        dev = p["gpu"] / f"nvidia{i}"
        if not dev.is_symlink():
            dev.symlink_to("/dev/null")
    changed = False
    changed |= write_if_changed(p["etc"] / "slurm.conf", slurm_conf(shape, p))
    changed |= write_if_changed(p["etc"] / "topology.conf", topology_conf(shape))
    if LANE.nvl:
        # Slurm reads topology.yaml instead of topology.conf when it exists.
        changed |= write_if_changed(p["etc"] / "topology.yaml", topology_yaml(shape))
    changed |= write_if_changed(p["etc"] / "gres.conf", gres_conf(shape, p))
    changed |= write_if_changed(p["etc"] / "slurmdbd.conf", slurmdbd_conf(shape, p), 0o600)
    # The arnold SPANK plugin (built by `make -C spank`); srun and sbatch read plugstack.conf
    # afresh, so adding it needs no daemon restart.
    plugin = install_plugin(p)
    plugstack = "# SPANK plugins of the local development cluster.\n"
    if plugin is not None:
        # rankdir: where `arnold reserve sync` writes the rank files of jobs it places again.
        plugstack += f"required {plugin} rankdir={p['arnold']}/rankorder\n"
    write_if_changed(p["etc"] / "plugstack.conf", plugstack)
    write_if_changed(p["etc"] / "arnold.toml", arnold_toml(p))
    prolog = p["etc"] / "arnold-prolog"
    if not prolog.exists():
        # slurmctld checks PrologSlurmctld when it starts and drops a missing one for good;
        # the real wrapper (write_prolog) needs the site install, made after the daemons.
        write_if_changed(prolog, "#!/bin/sh\n# replaced by `make cluster` once arnold is "
                                 "installed\nexit 0\n", 0o755)
    return changed


def install_plugin(p: dict[str, Path]) -> Path | None:
    """Copy the SPANK plugin (built by `make -C spank`) where every user's srun can load it."""
    built = REPO / "spank" / ("" if LANE.root is None else f"build-{LANE.version}") / \
        "arnold_rankfile.so"
    if not built.exists():
        return None
    target = p["lib"] / built.name
    data = built.read_bytes()
    if not target.exists() or target.read_bytes() != data:
        tmp = target.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.chmod(0o755)
        tmp.replace(target)  # a new inode: srun processes mapping the old file keep it
    return target


def _source_digest() -> str:
    digest = hashlib.sha1()
    for package in ("slurm_arnold", "reservations", "predictor", "site_config", "benchmarks"):
        for path in sorted((REPO / package).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(REPO)).encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()


def mount_state_fs(p: dict[str, Path]) -> str | None:
    """With ``ARNOLD_DEV_STATE_MB`` set, the site's state directory on a tmpfs of that many
    MiB: a file system of its own, which ``arnold bench site`` fills for its full-disk fault
    without touching the host's. What the directory held is copied in; the mount stays until
    ``down``. Returns what it did, None where there was nothing to do."""
    raw = os.environ.get("ARNOLD_DEV_STATE_MB", "")
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 16:
        raise ClusterError(f"ARNOLD_DEV_STATE_MB={raw!r}: give the state file system's size in "
                           "MiB, at least 16, or unset it")
    state = p["arnold"]
    if os.path.ismount(state):
        return None
    held = state.with_name(state.name + ".disk")
    shutil.rmtree(held, ignore_errors=True)
    if state.exists():
        state.rename(held)
    state.mkdir(parents=True)
    run(["mount", "-t", "tmpfs", "-o", f"size={raw}m,mode=0755", "arnold-state", str(state)])
    if held.exists():
        run(["cp", "-a", f"{held}/.", str(state)])  # -a: the users' directories stay theirs
        shutil.rmtree(held)
    return f"state directory on a {raw} MiB tmpfs"


def unmount_state_fs(p: dict[str, Path]) -> None:
    """Put the state directory back on the disk (its files kept) if ``mount_state_fs`` put
    it on a tmpfs."""
    state = p["arnold"]
    if not os.path.ismount(state):
        return
    held = state.with_name(state.name + ".disk")
    shutil.rmtree(held, ignore_errors=True)
    held.mkdir()
    run(["cp", "-a", f"{state}/.", str(held)])
    run(["umount", str(state)])
    state.rmdir()
    held.rename(state)


def install_site(p: dict[str, Path]) -> None:
    """slurm-arnold for every user: a venv of Debian's Python with the project installed (not
    editable: it must not depend on the checkout), refreshed when the sources change; then
    `arnold site init` for the site's directories and their modes."""
    venv, python = p["venv"], p["venv"] / "bin" / "python"
    deps_stamp, src_stamp = venv / ".deps", venv / ".sources"
    deps = hashlib.sha1((REPO / "pyproject.toml").read_bytes()).hexdigest()
    sources = _source_digest()
    if not python.exists():
        run(["/usr/bin/python3", "-m", "venv", str(venv)])
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    shutil.rmtree(REPO / "build", ignore_errors=True)  # setuptools' stale in-tree build
    if not deps_stamp.exists() or deps_stamp.read_text() != deps:
        print("devcluster: installing slurm-arnold for every user into "
              f"{venv} (Debian's Python)", file=sys.stderr)
        run([*pip, str(REPO)])
        deps_stamp.write_text(deps)
        src_stamp.write_text(sources)
    elif not src_stamp.exists() or src_stamp.read_text() != sources:
        run([*pip, "--no-deps", "--force-reinstall", str(REPO)])
        src_stamp.write_text(sources)
    shutil.rmtree(REPO / "build", ignore_errors=True)
    if LANE.built:
        # pyslurm in the site install: arnold's Slurm adapter serves its reads through it.
        wheel = pyslurm_wheel(LANE, python)
        have = subprocess.run([str(python), "-c", "import importlib.metadata as m; "
                               "print(m.version('pyslurm'))"], capture_output=True, text=True)
        if have.stdout.strip() != wheel.name.split("-")[1]:
            run([*pip, "--no-deps", "--force-reinstall", str(wheel)])
    run([str(venv / "bin" / "arnold"), "site", "init"], env=slurm_env(p))
    write_prolog(p)


def start_munge(p: dict[str, Path]) -> bool:
    pidfile = RUN / "munged.pid"
    if pid_alive(pidfile):
        return False
    key = p["munge_key"]
    key.parent.mkdir(parents=True, exist_ok=True)
    key.parent.chmod(0o700)
    if not key.exists():
        key.write_bytes(os.urandom(128))
    key.chmod(0o400)
    run([
        "/usr/sbin/munged", "--force",
        f"--socket={p['munge_socket']}", f"--key-file={key}", f"--pid-file={pidfile}",
        f"--log-file={p['log']}/munged.log", f"--seed-file={RUN}/munge/munged.seed",
    ])
    wait_for("munged", lambda: p["munge_socket"].exists(), 10, p["log"] / "munged.log")
    return True


def mysql(p: dict[str, Path], sql: str) -> None:
    client = shutil.which("mariadb") or "mysql"
    run([client, "--protocol=socket", f"--socket={p['mysql_socket']}", "-u", "root", "-e", sql])


def start_mariadb(shape: Shape, p: dict[str, Path]) -> bool:
    pidfile = RUN / "mariadb.pid"
    if pid_alive(pidfile):
        return False
    ensure_port_free(shape.port_base + 6, "mariadbd")
    datadir = p["mysql"]
    if not (datadir / "mysql").exists():
        install = shutil.which("mariadb-install-db") or "mysql_install_db"
        run([install, f"--datadir={datadir}", "--user=root", "--skip-test-db",
             "--auth-root-authentication-method=socket"])
    log = p["log"] / "mariadb.log"
    subprocess.Popen(
        ["/usr/sbin/mariadbd", "--no-defaults", f"--datadir={datadir}", "--user=root",
         f"--socket={p['mysql_socket']}", f"--port={shape.port_base + 6}",
         "--bind-address=127.0.0.1", f"--pid-file={pidfile}", f"--log-error={log}",
         "--innodb-buffer-pool-size=64M", "--skip-name-resolve"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    wait_for("mariadbd", lambda: p["mysql_socket"].exists() and pid_alive(pidfile) is not None,
             60, log)
    mysql(p, f"CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '{DB_PASSWORD}';"
             "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
             "GRANT ALL ON `slurm_acct_db\\_%`.* TO 'slurm'@'127.0.0.1';")
    return True


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def ensure_port_free(port: int, daemon: str) -> None:
    """Refuse to start ``daemon`` on a port something else (another checkout's cluster) holds."""
    if port_open(port):
        raise ClusterError(
            f"port {port} for {daemon} is already in use (another local cluster?); stop it "
            "with its `make cluster-down`, or set ARNOLD_DEV_PORT_BASE to another base port"
        )


def start_slurmdbd(shape: Shape, p: dict[str, Path]) -> bool:
    pidfile = RUN / "slurmdbd.pid"
    if pid_alive(pidfile):
        return False
    ensure_port_free(shape.port_base + 19, "slurmdbd")
    env = slurm_env(p)
    slurmdbd = "/usr/sbin/slurmdbd" if LANE.root is None else str(p["bin"] / "slurmdbd")
    run([slurmdbd], env=env)  # reads slurmdbd.conf beside SLURM_CONF
    wait_for("slurmdbd", lambda: port_open(shape.port_base + 19), 60, p["log"] / "slurmdbd.log")
    clusters = run(["sacctmgr", "-n", "-P", "list", "cluster", "format=cluster"], env=env)
    if CLUSTER_NAME not in clusters.stdout.split():
        run(["sacctmgr", "-i", "add", "cluster", CLUSTER_NAME], env=env)
    return True


def start_slurmctld(shape: Shape, p: dict[str, Path]) -> bool:
    if pid_alive(RUN / "slurmctld.pid"):
        return False
    ensure_port_free(shape.port_base + 17, "slurmctld")
    env = slurm_env(p)
    args = [str(p["bin"] / "slurmctld"), "-f", str(p["etc"] / "slurm.conf")]
    if (p["state"] / "job_state").exists() and not (p["state"] / "assoc_usage").exists():
        # Killed before its first full save (a young cluster): Slurm 26.05 refuses to start
        # without the association usage file unless told to go on without it (-i); the jobs'
        # state is read as saved.
        print("devcluster: warning: slurmctld's saved state has no assoc_usage (it died before "
              "saving it); starting it with -i", file=sys.stderr)
        args.append("-i")
    run(args, env=env)
    wait_for("slurmctld", lambda: port_open(shape.port_base + 17), 60,
             p["log"] / "slurmctld.log")
    return True


def start_slurmds(shape: Shape, p: dict[str, Path]) -> int:
    env = slurm_env(p)
    started = []
    for name in [shape.node(i) for i in range(shape.node_count)] + nvl_names():
        if pid_alive(RUN / f"slurmd-{name}.pid"):
            continue
        (p["spool"] / name).mkdir(parents=True, exist_ok=True)
        started.append(subprocess.Popen(
            [str(p["bin"] / "slurmd"), "-N", name, "-f", str(p["etc"] / "slurm.conf"),
             "-d", str(p["bin"] / "slurmstepd")],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True,
        ))
    for proc in started:
        _, err = proc.communicate()
        if proc.returncode != 0:
            raise ClusterError(f"slurmd exited {proc.returncode}: {err.strip()}")
    return len(started)


def node_states(p: dict[str, Path]) -> dict[str, str]:
    proc = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], env=slurm_env(p),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return {}
    return dict(line.split() for line in proc.stdout.splitlines() if line.strip())


def idle_timeout(shape: Shape) -> float:
    """How long a fresh cluster may take to have every node idle: 74 s for 2,048 nodes on two
    idle cores (docs), so 0.15 s a node with room for a busy machine, and never under 120 s."""
    return max(120.0, 0.15 * (shape.node_count + len(nvl_names())))


def wait_answering(shape: Shape, p: dict[str, Path], timeout: float) -> None:
    """Every node known to slurmctld and answering it, in whatever state jobs and admins left
    it (allocated, drained, down by an admin): what a restart waits for, not idleness."""
    def answering() -> bool:
        states = node_states(p)
        return len(states) == shape.node_count + len(nvl_names()) and not any(
            s.endswith("*") or s.startswith("unknown") for s in states.values())

    try:
        wait_for("every node answering", answering, timeout, p["log"] / "slurmctld.log")
    except ClusterError:
        bad = {n: s for n, s in node_states(p).items() if s.endswith("*")}
        raise ClusterError(
            f"nodes not answering after {timeout:.0f} s: {dict(list(bad.items())[:5])}; "
            f"see {p['log']}/slurmctld.log and slurmd-<node>.log"
        ) from None


def wait_idle(shape: Shape, p: dict[str, Path], timeout: float = 120.0) -> None:
    def all_idle() -> bool:
        states = node_states(p)
        return len(states) == shape.node_count + len(nvl_names()) and all(
            s.rstrip("*~#%") in ("idle",) for s in states.values()
        )

    try:
        wait_for("every node idle", all_idle, timeout, p["log"] / "slurmctld.log")
    except ClusterError:
        states = node_states(p)
        bad = {n: s for n, s in states.items() if s != "idle"}
        raise ClusterError(
            f"nodes not idle after {timeout:.0f} s: {dict(list(bad.items())[:5])}; "
            f"see {p['log']}/slurmctld.log and slurmd-<node>.log"
        ) from None


def _saved_shape() -> Shape | None:
    """The shape the cluster was last configured with (``SHAPE_FILE``), if readable."""
    try:
        return Shape(**json.loads((RUN / SHAPE_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def up() -> None:
    running = [f for f in RUN.glob("*.pid") if pid_alive(f)]
    # A restart (the bench's faults, a developer's `make cluster`) keeps the cluster's size.
    shape = Shape.from_env(_saved_shape() if running else None)
    check_packages()
    p = paths()
    changed = configure(shape, p)
    write_if_changed(RUN / SHAPE_FILE, json.dumps(dataclasses.asdict(shape)) + "\n")
    if changed and running:
        print("devcluster: configuration changed, restarting the daemons", file=sys.stderr)
        down()
    # On a running cluster only the daemons that died start again, from Slurm's saved state,
    # and nothing waits for nodes that jobs hold: a restart must not disturb the jobs.
    restart = bool(running) and not changed
    t0 = time.monotonic()
    started = [name for name, did in (
        ("munged", start_munge(p)), ("mariadbd", start_mariadb(shape, p)),
        ("slurmdbd", start_slurmdbd(shape, p)), ("slurmctld", start_slurmctld(shape, p)))
        if did]
    slurmds = start_slurmds(shape, p)
    if slurmds:
        started.append(f"{slurmds} slurmd")
    if restart:
        wait_answering(shape, p, 60.0)
    else:
        wait_idle(shape, p, idle_timeout(shape))
    mounted = mount_state_fs(p)
    if mounted:
        print(f"devcluster: {mounted}", file=sys.stderr)
    install_site(p)
    conf = p["etc"] / "slurm.conf"
    # The site's arnold comes last on PATH: a developer's own venv, when active, wins.
    lines = [f"export SLURM_CONF={conf}",
             f"case :$PATH: in *:{p['venv']}/bin:*) ;; "
             f"*) export PATH=$PATH:{p['venv']}/bin ;; esac"]
    if LANE.root is not None:
        # This lane's Slurm commands come first, before the host's.
        lines += [f"case :$PATH: in :{p['slurm_bin']}:*) ;; "
                  f"*) export PATH={p['slurm_bin']}:$PATH ;; esac",
                  f"export ARNOLD_DEV_SLURM={LANE.version}"]
    write_if_changed(ENV_FILE, "\n".join(lines) + "\n")
    if restart:
        what = f"restarted {', '.join(started)}" if started else "every daemon was running"
        done = f"{shape.node_count} nodes x {shape.gpus} GPUs answering; {what}"
    else:
        done = f"{shape.node_count} nodes x {shape.gpus} GPUs idle"
    print(f"devcluster: Slurm {LANE.version}: {done} ({time.monotonic() - t0:.1f} s); run: "
          f"source {ENV_FILE}", file=sys.stderr)


def stop_pidfile(pidfile: Path, timeout: float = 20.0) -> None:
    pid = pid_alive(pidfile)
    if pid is None:
        pidfile.unlink(missing_ok=True)
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and pid_alive(pidfile) == pid:
        time.sleep(0.1)
    if pid_alive(pidfile) == pid:
        os.kill(pid, signal.SIGKILL)
    pidfile.unlink(missing_ok=True)


def stop_slurm(p: dict[str, Path]) -> None:
    for pidfile in sorted(RUN.glob("slurmd-*.pid")):
        stop_pidfile(pidfile)
    stop_pidfile(RUN / "slurmctld.pid")


def kill_leftovers() -> list[int]:
    """SIGKILL what still runs from this cluster's ``bin`` after the daemons were stopped by
    their PID files (a slurmctld whose PID file went before it did, a forked helper such as
    slurmscriptd left behind); the PIDs killed."""
    marks = {f"{RUN}/bin/", f"{RUN.resolve()}/bin/"}
    killed = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(
                errors="replace")
        except OSError:
            continue
        if any(cmdline.startswith(mark) for mark in marks):
            try:
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
            except ProcessLookupError:
                pass
    return killed


def down() -> None:
    p = paths()
    if not RUN.exists():
        return
    stop_slurm(p)
    stop_pidfile(RUN / "slurmdbd.pid")
    stop_pidfile(RUN / "mariadb.pid", timeout=60)
    stop_pidfile(RUN / "munged.pid")
    left = kill_leftovers()
    unmount_state_fs(p)
    if left:
        print(f"devcluster: killed {len(left)} leftover process(es) of this cluster",
              file=sys.stderr)
    print("devcluster: stopped", file=sys.stderr)


def status() -> int:
    p = paths()
    for name in ("munged", "mariadb", "slurmdbd", "slurmctld"):
        pid = pid_alive(RUN / f"{name}.pid")
        print(f"{name:10s} {'running pid ' + str(pid) if pid else 'stopped'}")
    slurmds = [f for f in RUN.glob("slurmd-*.pid") if pid_alive(f)]
    print(f"{'slurmd':10s} {len(slurmds)} running")
    states = node_states(p)
    counts: dict[str, int] = {}
    for s in states.values():
        counts[s] = counts.get(s, 0) + 1
    print(f"{'nodes':10s} {counts or 'unknown'}")
    return 0 if pid_alive(RUN / "slurmctld.pid") else 1


def main(argv: list[str]) -> int:
    args = argv[1:]
    if args[:1] == ["--slurm"] and len(args) >= 2:
        if args[1] not in LANES:
            print(f"devcluster: --slurm {args[1]}: use one of {', '.join(LANES)}",
                  file=sys.stderr)
            return 2
        select_lane(args[1])
        args = args[2:]
    if len(args) != 1 or args[0] not in ("up", "down", "status", "root", "wheel"):
        print(f"usage: devcluster.py [--slurm {'|'.join(LANES)}] up|down|status|root|wheel",
              file=sys.stderr)
        return 2
    try:
        if args[0] == "root":
            if LANE.root is not None:
                print(ensure_root(LANE))
            return 0
        if args[0] == "wheel":
            # The pyslurm wheel of a built lane, for the developer's venv (`make test`).
            if LANE.built:
                print(pyslurm_wheel(LANE, paths()["venv"] / "bin" / "python"))
            return 0
        if args[0] == "up":
            up()
        elif args[0] == "down":
            down()
        else:
            return status()
    except ClusterError as exc:
        print(f"devcluster: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
