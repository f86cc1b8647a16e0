"""Running Slurm's commands: the one place a subprocess is started. Every command is logged
at DEBUG before it runs; a failure raises ``SlurmError`` carrying the command, exit code,
stdout and stderr; a missing command raises ``SlurmNotFound``. Commands honour ``SLURM_CONF``
through the environment, as Slurm's own commands do. Slurm's version is read once per runner
and picks the ``--json`` parser family; a schema we have no parser for switches the runner to
text for good."""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from slurm_arnold.errors import SlurmConfMissing, SlurmError, SlurmNotFound, SlurmOutputError
from slurm_arnold.slurm.common import json_version

log = logging.getLogger(__name__)

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


class Runner:
    """Runs Slurm's commands. ``env`` overrides the environment (e.g. ``SLURM_CONF``);
    ``use_json=False`` reads every document as text."""

    def __init__(self, env: Mapping[str, str] | None = None, *, use_json: bool = True,
                 timeout: float = 120.0) -> None:
        self.env = dict(os.environ if env is None else env)
        self.use_json = use_json
        self.timeout = timeout
        self._version: tuple[int, int] | None = None

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

    def json_doc(self, args: Sequence[str]) -> dict[str, Any] | None:
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
        if json_version(doc) not in schemas:
            log.debug("%s --json: schema %r has no parser, using text", args[0],
                      json_version(doc))
            self.use_json = False
            return None
        return doc

    def version(self) -> tuple[int, int]:
        """Slurm's (major, minor) version, from ``sinfo --version`` (read once)."""
        if self._version is None:
            out = self.run(["sinfo", "--version"]).stdout
            m = re.search(r"(\d+)\.(\d+)", out)
            if not m:
                raise SlurmOutputError(f"sinfo --version: cannot read {out.strip()!r}")
            self._version = int(m.group(1)), int(m.group(2))
        return self._version
