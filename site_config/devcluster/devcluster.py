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

Standard library only: it runs before the project's virtual environment exists.

Usage: devcluster.py up | down | status
Size: ARNOLD_DEV_MINIPODS (4), ARNOLD_DEV_LEAVES (leaves per minipod, 4),
ARNOLD_DEV_NODES (nodes per leaf, 4), ARNOLD_DEV_GPUS (GPUs per node, 8),
ARNOLD_DEV_PORT_BASE (16800).
"""

from __future__ import annotations

import hashlib
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


def _reachable_by_all(path: Path) -> bool:
    """Whether every directory from / down to ``path`` lets others through (o+x)."""
    return all(p.stat().st_mode & 0o001 for p in (path, *path.parents))


def _run_dir() -> Path:
    local = REPO / ".devcluster"
    if local.is_symlink():
        return local.resolve()
    if local.exists() or _reachable_by_all(REPO):
        return local
    digest = hashlib.sha1(str(REPO).encode()).hexdigest()[:8]
    target = Path("/var/tmp") / f"arnold-dev-{digest}"
    target.mkdir(parents=True, exist_ok=True)
    local.symlink_to(target)
    return target


RUN = _run_dir()
ENV_FILE = REPO / "devcluster.env"
CLUSTER_NAME = "arnolddev"
DB_PASSWORD = "arnold-dev-only"


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
    def from_env(cls) -> Shape:
        def number(name: str, default: int) -> int:
            raw = os.environ.get(name, str(default))
            if not raw.isdigit() or int(raw) < 1:
                raise ClusterError(f"{name}={raw!r} is not a positive integer; unset it or fix it")
            return int(raw)

        return cls(
            number("ARNOLD_DEV_MINIPODS", 4),
            number("ARNOLD_DEV_LEAVES", 4),
            number("ARNOLD_DEV_NODES", 4),
            number("ARNOLD_DEV_GPUS", 8),
            number("ARNOLD_DEV_PORT_BASE", 16800),
        )

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
    return Path("/tmp") / f"arnold-{digest}"


def paths() -> dict[str, Path]:
    sock = socket_dir()
    return {
        "etc": RUN / "etc",
        "bin": RUN / "bin",
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


def slurm_conf(shape: Shape, p: dict[str, Path]) -> str:
    first_port = shape.port_base + 1000 + 1
    last_port = first_port + shape.node_count - 1
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
SwitchType=switch/none
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
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def gres_conf(shape: Shape, p: dict[str, Path]) -> str:
    return (
        "AutoDetect=off\n"
        f"NodeName={shape.all_nodes} Name=gpu File={p['gpu']}/nvidia[0-{shape.gpus - 1}]\n"
    )


def slurmdbd_conf(shape: Shape, p: dict[str, Path]) -> str:
    return f"""# slurmdbd of the local development cluster (must stay mode 0600).
AuthType=auth/munge
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
    return pid


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


def run(cmd: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        detail = proc.stderr.strip() or proc.stdout.strip()
        raise ClusterError(f"{' '.join(cmd)} exited {proc.returncode}: {detail}")
    return proc


def slurm_env(p: dict[str, Path]) -> dict[str, str]:
    env = dict(os.environ)
    env["SLURM_CONF"] = str(p["etc"] / "slurm.conf")
    return env


def check_packages() -> None:
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
    # Daemons must run under their own names: under another name Slurm drops Gres= lines.
    for name in ("slurmctld", "slurmd", "slurmstepd"):
        link = p["bin"] / name
        if not link.is_symlink():
            link.symlink_to(f"/usr/sbin/{name}-wlm")
    for i in range(shape.gpus):
        dev = p["gpu"] / f"nvidia{i}"
        if not dev.is_symlink():
            dev.symlink_to("/dev/null")
    changed = False
    changed |= write_if_changed(p["etc"] / "slurm.conf", slurm_conf(shape, p))
    changed |= write_if_changed(p["etc"] / "topology.conf", topology_conf(shape))
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
    built = REPO / "spank" / "arnold_rankfile.so"
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
    run([str(venv / "bin" / "arnold"), "site", "init"], env=slurm_env(p))
    write_prolog(p)


def start_munge(p: dict[str, Path]) -> None:
    pidfile = RUN / "munged.pid"
    if pid_alive(pidfile):
        return
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


def mysql(p: dict[str, Path], sql: str) -> None:
    client = shutil.which("mariadb") or "mysql"
    run([client, "--protocol=socket", f"--socket={p['mysql_socket']}", "-u", "root", "-e", sql])


def start_mariadb(shape: Shape, p: dict[str, Path]) -> None:
    pidfile = RUN / "mariadb.pid"
    if pid_alive(pidfile):
        return
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


def start_slurmdbd(shape: Shape, p: dict[str, Path]) -> None:
    pidfile = RUN / "slurmdbd.pid"
    if pid_alive(pidfile):
        return
    ensure_port_free(shape.port_base + 19, "slurmdbd")
    env = slurm_env(p)
    run(["/usr/sbin/slurmdbd"], env=env)  # reads slurmdbd.conf beside SLURM_CONF
    wait_for("slurmdbd", lambda: port_open(shape.port_base + 19), 60, p["log"] / "slurmdbd.log")
    clusters = run(["sacctmgr", "-n", "-P", "list", "cluster", "format=cluster"], env=env)
    if CLUSTER_NAME not in clusters.stdout.split():
        run(["sacctmgr", "-i", "add", "cluster", CLUSTER_NAME], env=env)


def start_slurmctld(shape: Shape, p: dict[str, Path]) -> None:
    if pid_alive(RUN / "slurmctld.pid"):
        return
    ensure_port_free(shape.port_base + 17, "slurmctld")
    env = slurm_env(p)
    run([str(p["bin"] / "slurmctld"), "-f", str(p["etc"] / "slurm.conf")], env=env)
    wait_for("slurmctld", lambda: port_open(shape.port_base + 17), 60,
             p["log"] / "slurmctld.log")


def start_slurmds(shape: Shape, p: dict[str, Path]) -> None:
    env = slurm_env(p)
    started = []
    for i in range(shape.node_count):
        name = shape.node(i)
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


def node_states(p: dict[str, Path]) -> dict[str, str]:
    proc = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], env=slurm_env(p),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return {}
    return dict(line.split() for line in proc.stdout.splitlines() if line.strip())


def wait_idle(shape: Shape, p: dict[str, Path], timeout: float = 120.0) -> None:
    def all_idle() -> bool:
        states = node_states(p)
        return len(states) == shape.node_count and all(
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


def up() -> None:
    shape = Shape.from_env()
    check_packages()
    p = paths()
    changed = configure(shape, p)
    running = [f for f in RUN.glob("*.pid") if pid_alive(f)]
    if changed and running:
        print("devcluster: configuration changed, restarting the daemons", file=sys.stderr)
        down()
    t0 = time.monotonic()
    start_munge(p)
    start_mariadb(shape, p)
    start_slurmdbd(shape, p)
    start_slurmctld(shape, p)
    start_slurmds(shape, p)
    wait_idle(shape, p)
    install_site(p)
    conf = p["etc"] / "slurm.conf"
    # The site's arnold comes last on PATH: a developer's own venv, when active, wins.
    write_if_changed(ENV_FILE, f"export SLURM_CONF={conf}\n"
                               f"case :$PATH: in *:{p['venv']}/bin:*) ;; "
                               f"*) export PATH=$PATH:{p['venv']}/bin ;; esac\n")
    print(
        f"devcluster: {shape.node_count} nodes x {shape.gpus} GPUs idle "
        f"({time.monotonic() - t0:.1f} s); run: source {ENV_FILE}",
        file=sys.stderr,
    )


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


def down() -> None:
    p = paths()
    if not RUN.exists():
        return
    stop_slurm(p)
    stop_pidfile(RUN / "slurmdbd.pid")
    stop_pidfile(RUN / "mariadb.pid", timeout=60)
    stop_pidfile(RUN / "munged.pid")
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
    if len(argv) != 2 or argv[1] not in ("up", "down", "status"):
        print("usage: devcluster.py up|down|status", file=sys.stderr)
        return 2
    try:
        if argv[1] == "up":
            up()
        elif argv[1] == "down":
            down()
        else:
            return status()
    except ClusterError as exc:
        print(f"devcluster: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
