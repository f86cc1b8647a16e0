"""Which backend serves the Slurm adapter (``slurm.backend``): pyslurm only where it is installed
and built for the running Slurm's release, Slurm's commands otherwise, said in one info line."""

from __future__ import annotations

import importlib.util
import logging
import os
import subprocess
import sys

import pytest

from slurm_arnold.errors import ArnoldError
from slurm_arnold.slurm import Slurm
from slurm_arnold.slurm.choice import choose_backend, pyslurm_problem
from slurm_arnold.slurm.commands import CommandsBackend
from slurm_arnold.slurm.runner import Runner

HAVE_PYSLURM = importlib.util.find_spec("pyslurm") is not None


class _Release(Runner):
    """A runner that says which Slurm release runs, without asking one (the version is all
    the choice reads before it imports pyslurm)."""

    def __init__(self, version: tuple[int, int]) -> None:
        super().__init__({})
        self._version = version


def test_commands_when_asked_for_them() -> None:
    assert isinstance(choose_backend(_Release((25, 11)), "commands"), CommandsBackend)


def test_an_unknown_setting_is_one_error_naming_the_choices() -> None:
    with pytest.raises(ArnoldError, match="use one of auto, pyslurm, commands"):
        choose_backend(_Release((25, 11)), "rest")


@pytest.mark.live  # what is installed depends on the lane (make test SLURM=25.11 adds pyslurm)
@pytest.mark.skipif(HAVE_PYSLURM, reason="pyslurm is installed here (the 25.11 lane)")
def test_without_pyslurm_auto_falls_back_with_one_info_line(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="slurm_arnold.slurm.choice"):
        backend = choose_backend(_Release((25, 11)), "auto")
    assert isinstance(backend, CommandsBackend)
    assert [r.getMessage() for r in caplog.records] == [
        "Slurm backend: commands (pyslurm is not installed)"]
    with pytest.raises(ArnoldError, match="pyslurm is not installed; install pyslurm"):
        choose_backend(_Release((25, 11)), "pyslurm")


@pytest.mark.live
@pytest.mark.skipif(not HAVE_PYSLURM, reason="pyslurm is not installed (make test SLURM=25.11)")
def test_a_pyslurm_of_another_release_falls_back_to_the_commands(
        caplog: pytest.LogCaptureFixture) -> None:
    other = _Release((24, 11))
    assert pyslurm_problem(other) is not None and "this cluster runs 24.11" in str(
        pyslurm_problem(other))
    with caplog.at_level(logging.INFO, logger="slurm_arnold.slurm.choice"):
        assert isinstance(choose_backend(other, "auto"), CommandsBackend)
    assert len(caplog.records) == 1 and "commands (pyslurm" in caplog.records[0].getMessage()


def test_text_reads_are_the_commands_whatever_the_setting() -> None:
    assert isinstance(Slurm({}, use_json=False).backend, CommandsBackend)


def test_site_show_names_the_serving_backend_and_v_says_why(
        isolated_config: object) -> None:
    # `arnold -v site show` on a cluster without pyslurm: the commands, and why (info).
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARNOLD_")}
    proc = subprocess.run([sys.executable, "-c", "from slurm_arnold.cli.main import main; "
                           "main()", "-v", "site", "show"], capture_output=True, text=True,
                          env={**env, "ARNOLD_SLURM__BACKEND": "commands"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1].split(None, 1) == ["slurm", "served by Slurm's commands"]
    assert "Slurm backend: commands" in proc.stderr and "Traceback" not in proc.stderr


def test_a_bad_backend_setting_is_one_line_naming_the_key(isolated_config: object) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARNOLD_")}
    proc = subprocess.run([sys.executable, "-c", "from slurm_arnold.cli.main import main; "
                           "main()", "site", "show"], capture_output=True, text=True,
                          env={**env, "ARNOLD_SLURM__BACKEND": "rest"})
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "slurm.backend" in proc.stderr
