"""sbatch's command line, ``SBATCH_*`` variables and ``#SBATCH``/``#ARNOLD`` lines.

We split arnold-sbatch's arguments into our own options and everything else, which goes to
sbatch untouched and in order. To know where sbatch's options end and the script begins we
must know which of sbatch's options take a value (measured on Slurm 22.05: ``--export ALL``
takes ``ALL``, while ``--nice``, ``--exclusive``, ``--propagate`` and ``--get-user-env`` take
one only as ``--opt=value``). Long options may be abbreviated to a unique prefix, as getopt
allows. Effective values follow sbatch's precedence: command line > ``SBATCH_*`` environment >
``#SBATCH`` lines.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from slurm_arnold.errors import ArnoldError

# Short options of sbatch that take a value, and their long names.
SHORT_WITH_VALUE = {
    "a": "array", "A": "account", "b": "begin", "B": "extra-node-info", "c": "cpus-per-task",
    "C": "constraint", "d": "dependency", "D": "chdir", "e": "error", "F": "nodefile",
    "G": "gpus", "i": "input", "J": "job-name", "L": "licenses", "M": "clusters",
    "m": "distribution", "n": "ntasks", "N": "nodes", "o": "output", "p": "partition",
    "q": "qos", "S": "core-spec", "t": "time", "w": "nodelist", "x": "exclude",
}
SHORT_FLAGS = {"h": "help", "H": "hold", "k": "no-kill", "O": "overcommit", "Q": "quiet",
               "s": "oversubscribe", "v": "verbose", "V": "version", "W": "wait"}
LONG_WITH_VALUE = {
    *SHORT_WITH_VALUE.values(), "acctg-freq", "batch", "bb", "bbf", "cluster-constraint",
    "comment", "container", "cores-per-socket", "cpu-freq", "cpus-per-gpu", "deadline",
    "delay-boot", "export", "export-file", "gid", "gpu-bind", "gpu-freq", "gpus-per-node",
    "gpus-per-socket", "gpus-per-task", "gres", "gres-flags", "hint", "kill-on-invalid-dep",
    "mail-type", "mail-user", "mcs-label", "mem", "mem-bind", "mem-per-cpu", "mem-per-gpu",
    "mincpus", "network", "ntasks-per-core", "ntasks-per-gpu", "ntasks-per-node",
    "ntasks-per-socket", "open-mode", "power", "prefer", "priority", "profile", "reservation",
    "segment", "signal", "sockets-per-node", "switches", "thread-spec", "threads-per-core",
    "time-min", "tmp", "uid", "wckey", "wrap",
}
LONG_FLAGS = {
    *SHORT_FLAGS.values(), "contiguous", "exclusive", "get-user-env", "ignore-pbs", "nice",
    "no-requeue", "parsable", "propagate", "reboot", "requeue", "spread-job", "test-only",
    "usage", "use-min-nodes",
}
# Our options: value-taking, as --name VALUE or --name=VALUE; and flags (--explain, or
# --explain=PATH for where the picture goes).
OURS = ("tp", "pp", "dp", "cp", "ep", "nvlink-group", "alpha", "align", "placement",
        "rank-order", "model", "global-batch", "gpu-type", "tier-weight")
OUR_FLAGS = ("explain",)

# The SBATCH_* input variables of sbatch (man sbatch, 22.05) for the options they set.
ENV_VARS = {
    "account": "SBATCH_ACCOUNT", "acctg-freq": "SBATCH_ACCTG_FREQ", "array": "SBATCH_ARRAY_INX",
    "clusters": "SBATCH_CLUSTERS", "constraint": "SBATCH_CONSTRAINT",
    "container": "SBATCH_CONTAINER", "core-spec": "SBATCH_CORE_SPEC",
    "cpus-per-gpu": "SBATCH_CPUS_PER_GPU", "delay-boot": "SBATCH_DELAY_BOOT",
    "distribution": "SBATCH_DISTRIBUTION", "exclusive": "SBATCH_EXCLUSIVE",
    "export": "SBATCH_EXPORT", "get-user-env": "SBATCH_GET_USER_ENV",
    "gpu-bind": "SBATCH_GPU_BIND", "gpu-freq": "SBATCH_GPU_FREQ", "gpus": "SBATCH_GPUS",
    "gpus-per-node": "SBATCH_GPUS_PER_NODE", "gpus-per-task": "SBATCH_GPUS_PER_TASK",
    "gres": "SBATCH_GRES", "gres-flags": "SBATCH_GRES_FLAGS", "hint": "SBATCH_HINT",
    "ignore-pbs": "SBATCH_IGNORE_PBS", "job-name": "SBATCH_JOB_NAME",
    "mem-bind": "SBATCH_MEM_BIND", "mem-per-cpu": "SBATCH_MEM_PER_CPU",
    "mem-per-gpu": "SBATCH_MEM_PER_GPU", "mem": "SBATCH_MEM_PER_NODE",
    "network": "SBATCH_NETWORK", "no-kill": "SBATCH_NO_KILL",
    "no-requeue": "SBATCH_NO_REQUEUE", "open-mode": "SBATCH_OPEN_MODE",
    "overcommit": "SBATCH_OVERCOMMIT", "partition": "SBATCH_PARTITION",
    "power": "SBATCH_POWER", "profile": "SBATCH_PROFILE", "qos": "SBATCH_QOS",
    "requeue": "SBATCH_REQUEUE", "reservation": "SBATCH_RESERVATION",
    "segment": "SBATCH_SEGMENT_SIZE",
    "signal": "SBATCH_SIGNAL", "spread-job": "SBATCH_SPREAD_JOB",
    "switches": "SBATCH_REQ_SWITCH", "thread-spec": "SBATCH_THREAD_SPEC",
    "threads-per-core": "SBATCH_THREADS_PER_CORE", "time": "SBATCH_TIMELIMIT",
    "use-min-nodes": "SBATCH_USE_MIN_NODES", "wait": "SBATCH_WAIT", "wckey": "SBATCH_WCKEY",
}


@dataclass
class Parsed:
    """arnold-sbatch's arguments, split."""

    ours: dict[str, str] = field(default_factory=dict)
    sbatch_args: list[str] = field(default_factory=list)  # options for sbatch, in order
    script: str | None = None
    script_args: list[str] = field(default_factory=list)
    cli: dict[str, str] = field(default_factory=dict)  # sbatch options given on the command line
    components: int = 1  # a heterogeneous job's components (split by ":")


def _resolve_long(name: str) -> str:
    """A long option name, with unique-prefix abbreviations expanded as getopt does."""
    known = LONG_WITH_VALUE | LONG_FLAGS | set(OURS) | set(OUR_FLAGS)
    if name in known:
        return name
    matches = sorted(k for k in known if k.startswith(name))
    if len(matches) > 1:
        raise ArnoldError(f"option --{name} is ambiguous (--{', --'.join(matches)}); "
                          "spell it out")
    return matches[0] if matches else name


def split_args(argv: Sequence[str]) -> Parsed:
    """Split the command line: our options out; sbatch's options, script and its arguments."""
    out = Parsed()
    i = 0
    args = list(argv)
    while i < len(args):
        arg = args[i]
        if arg == "--":
            out.sbatch_args.append(arg)
            i += 1
            break
        if arg == ":":  # the next component of a heterogeneous job (its options follow)
            out.sbatch_args.append(arg)
            out.components += 1
            i += 1
            continue
        if arg.startswith("--") and len(arg) > 2:
            name, eq, value = arg[2:].partition("=")
            full = _resolve_long(name)
            if full in OUR_FLAGS:
                out.ours[full] = value if eq else "1"
                i += 1
                continue
            if full in OURS:
                if not eq:
                    if i + 1 >= len(args):
                        raise ArnoldError(f"--{full} needs a value")
                    value = args[i + 1]
                    i += 1
                out.ours[full] = value
                i += 1
                continue
            out.sbatch_args.append(arg)
            if full in LONG_WITH_VALUE and not eq and i + 1 < len(args):
                value = args[i + 1]
                out.sbatch_args.append(value)
                i += 1
            if out.components == 1:
                out.cli[full] = value if (eq or full in LONG_WITH_VALUE) else "1"
            i += 1
            continue
        if arg.startswith("-") and len(arg) > 1:
            out.sbatch_args.append(arg)
            # clustered short options: -vvN4 or -N 4
            j = 1
            while j < len(arg):
                ch = arg[j]
                if ch in SHORT_WITH_VALUE:
                    value = arg[j + 1:]
                    if not value and i + 1 < len(args):
                        value = args[i + 1]
                        out.sbatch_args.append(value)
                        i += 1
                    if out.components == 1:
                        out.cli[SHORT_WITH_VALUE[ch]] = value
                    break
                if out.components == 1:
                    out.cli[SHORT_FLAGS.get(ch, ch)] = "1"
                j += 1
            i += 1
            continue
        break
    if i < len(args):
        out.script = args[i]
        out.script_args = args[i + 1:]
    return out


def directive_lines(script: str, prefix: str) -> list[list[str]]:
    """Tokens of each leading ``#SBATCH`` (or ``#ARNOLD``) line, read as sbatch does: only
    the comment block before the first command counts; shell-like quoting; ``#`` after
    whitespace starts a comment."""
    out = []
    for number, line in enumerate(script.splitlines(), start=1):
        stripped = line.strip()
        if number == 1 and stripped.startswith("#!"):
            continue
        if not stripped:
            continue
        if not stripped.startswith("#"):
            break
        if stripped.startswith(prefix) and (len(stripped) == len(prefix)
                                            or stripped[len(prefix)].isspace()):
            try:
                out.append(shlex.split(stripped[len(prefix):], comments=True))
            except ValueError as exc:
                raise ArnoldError(f"script line {number}: {prefix} line: {exc}") from None
    return out


def effective(parsed: Parsed, script_text: str | None,
              env: Mapping[str, str] | None = None) -> dict[str, str]:
    """sbatch's effective options for the job (its first component): command line >
    SBATCH_* environment > #SBATCH lines (those before a ``#SBATCH hetjob`` line)."""
    env = os.environ if env is None else env
    values: dict[str, str] = {}
    if script_text is not None:
        for tokens in directive_lines(script_text, "#SBATCH"):
            if tokens[:1] in (["hetjob"], ["packjob"]):
                break
            values.update(split_args(tokens).cli)
    for name, var in ENV_VARS.items():
        if var in env:
            values[name] = env[var]
    values.update(parsed.cli)
    return values


def arnold_options(parsed: Parsed, script_text: str | None) -> dict[str, str]:
    """Our options: command line over ``#ARNOLD`` lines."""
    ours: dict[str, str] = {}
    if script_text is not None:
        for tokens in directive_lines(script_text, "#ARNOLD"):
            got = split_args(tokens)
            unknown = [a for a in got.sbatch_args if a.startswith("-")]
            if unknown or got.script:
                bad = unknown[0] if unknown else got.script
                raise ArnoldError(f"#ARNOLD line: unknown option {bad}; "
                                  f"use --{', --'.join((*OURS, *OUR_FLAGS))}")
            ours.update(got.ours)
    ours.update(parsed.ours)
    return ours
