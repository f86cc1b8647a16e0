"""The predictor's import, retrain, predict and model swap (issue 6)."""

from __future__ import annotations

import getpass
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from predictor.history import load_history
from predictor.model import ACI_MARGIN, load
from predictor.service import RetrainBusy, retrain, retrain_lock
from predictor.swf import JobRecord
from site_config import load_config
from slurm_arnold.cli.main import main
from slurm_arnold.site_state import model_dir
from slurm_arnold.slurm import Slurm, parse_time_limit
from slurm_arnold.state import StateDB
from tests.conftest import REPO, wait_for_job
from tests.test_predictor import _jobs


def _swf(path: Path, n: int = 600, seed: int = 0, garbage: bool = False) -> Path:
    lines = ["; Version: 2.2"]
    for j in _jobs(n, seed):
        lines.append(f"{j.job_id} {j.submit} {(j.start or 0) - j.submit} "
                     f"{(j.end or 0) - (j.start or 0)} {j.procs} -1 -1 {j.procs} {j.time_limit} "
                     f"-1 1 {j.user[1:]} 1 -1 1 -1 -1 -1")
    if garbage:
        lines.insert(5, "this is not a job")
        lines.insert(9, "7 1 2")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def state_dir(isolated_config: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private state directory for the CLI and the library."""
    monkeypatch.setenv("ARNOLD_STATE_DIR", str(isolated_config / "state"))
    return isolated_config / "state"


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_import_is_idempotent_and_reports_bad_lines(state_dir: Path, tmp_path: Path) -> None:
    log = _swf(tmp_path / "log.swf", garbage=True)
    code, _, err = _run("predictor", "import", "swf", str(log))
    assert code == 0, err
    assert ("imported 600 new jobs (0 already known, 2 bad lines: line 6: 5 fields, SWF has 18; "
            "line 10: 3 fields") in err
    code, _, err = _run("predictor", "import", "swf", str(log))
    assert code == 0 and "imported 0 new jobs (600 already known" in err
    assert len(load_history(StateDB(state_dir / "arnold.db", journal="delete"))) == 600


def test_csv_import_with_iso_times(state_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text(
        "job_id,user,group,partition,qos,name,submit,start,end,nodes,gpus,procs,time_limit,"
        "state,exit_code\n"
        "1,ann,g,gpu,normal,train,2026-01-01T00:00:00+00:00,2026-01-01T00:10:00+00:00,"
        "1767229800,2,16,,3600,COMPLETED,0\n"
        "2,bob,g,gpu,normal,x,yesterday,,,,,,,FAILED,1\n")
    code, _, err = _run("predictor", "import", "csv", str(path))
    assert code == 0, err
    assert "imported 1 new jobs" in err and "1 bad lines: line 3" in err
    (job,) = load_history(StateDB(state_dir / "arnold.db", journal="delete"))
    assert (job.submit, job.start, job.end, job.gpus, job.time_limit) == (
        1767225600, 1767226200, 1767229800, 16, 3600)


def test_retrain_swaps_then_keeps_and_predict_explains(state_dir: Path, tmp_path: Path) -> None:
    _run("predictor", "import", "swf", str(_swf(tmp_path / "a.swf")))
    code, out, err = _run("predictor", "retrain", "--no-import", "--json")
    assert code == 0, err
    first = json.loads(out)
    assert first["swapped"] and "serving" not in first and "upper_alpha" not in first
    served = model_dir(load_config())
    assert served.is_symlink() and (served / "metadata.json").exists()
    # Nothing new since: the serving model would be judged on its own training data; kept.
    code, out, _ = _run("predictor", "retrain", "--no-import", "--json")
    second = json.loads(out)
    assert code == 0 and not second["swapped"] and second["compared_on"] == 0
    # No job the serving model predicted has ended since: its miscoverage level stays.
    assert second["upper_alpha"] == pytest.approx(0.1 - ACI_MARGIN)
    # New jobs (a later log): compared on them only, both models out of sample.
    later = _swf(tmp_path / "b.swf", n=600, seed=1)
    shifted = [" ".join([f[0], str(int(f[1]) + 400_000), *f[2:]])
               for f in (line.split() for line in later.read_text().splitlines()[1:])]
    later.write_text("\n".join(shifted) + "\n")
    _run("predictor", "import", "swf", str(later))
    code, out, _ = _run("predictor", "retrain", "--no-import", "--json")
    third = json.loads(out)
    assert code == 0 and third["compared_on"] >= 100 and "serving" in third
    assert third["swapped"] == (third["candidate"]["mae_log"]
                                <= third["serving"]["mae_log"] * 1.01)
    # The 600 jobs the serving model predicted moved the level (misses lower it, covers raise
    # it), and a swapped-in model starts from there.
    assert third["upper_alpha"] != pytest.approx(second["upper_alpha"])
    if third["swapped"]:
        meta = json.loads((served / "metadata.json").read_text())
        assert meta["upper_alpha"] == pytest.approx(third["upper_alpha"], abs=1e-6)
    code, out, err = _run("predictor", "predict", "--user", "3", "--time", "1:00:00",
                          "--procs", "4", "--json")
    assert code == 0, err
    pred = json.loads(out)
    assert 1 <= pred["point_s"] <= 3600 and pred["point_s"] <= pred["upper_s"] <= 3600
    assert len(pred["top_features"]) == 3
    assert {"feature", "value", "meaning", "effect_log"} <= set(pred["top_features"][0])


def test_corrupt_or_missing_model_is_one_clear_line(state_dir: Path, tmp_path: Path) -> None:
    code, _, err = _run("predictor", "predict", "--time", "60")
    assert code == 1 and "no model in" in err and "arnold predictor retrain" in err
    _run("predictor", "import", "swf", str(_swf(tmp_path / "a.swf")))
    _run("predictor", "retrain", "--no-import")
    (model_dir(load_config()) / "point.txt").write_text("tree\ngarbage=1\n")
    code, _, err = _run("predictor", "predict", "--time", "60")
    assert code == 1 and "cannot load the model" in err and len(err.strip().splitlines()) == 1
    # retrain replaces a corrupt serving model instead of failing on it.
    code, out, _ = _run("predictor", "retrain", "--no-import", "--json")
    assert code == 0 and json.loads(out)["swapped"]


def test_retrain_runs_never_overlap(state_dir: Path) -> None:
    config = load_config()
    busy = pytest.raises(RetrainBusy, match="another 'arnold predictor retrain' is running")
    with retrain_lock(config.state_dir), busy:
        retrain(config, StateDB(config.db_path, journal="delete"))


KILL_SCRIPT = """
import os, sys, time
from pathlib import Path
import predictor.model as m
where = sys.argv[2]
real = getattr(os, where)
def stall(*args, **kwargs):
    Path(sys.argv[3]).write_text("ready")
    time.sleep(60)
    return real(*args, **kwargs)
setattr(m.os, where, stall)
from predictor.service import retrain
from site_config import load_config
from slurm_arnold.state import StateDB
config = load_config()
retrain(config, StateDB(config.db_path, journal="delete"), force=True)
"""


@pytest.mark.parametrize("where", ["fsync", "replace"])
def test_a_killed_training_run_leaves_the_old_model_serving(state_dir: Path, tmp_path: Path,
                                                            where: str) -> None:
    _run("predictor", "import", "swf", str(_swf(tmp_path / "a.swf")))
    _run("predictor", "retrain", "--no-import")
    served = model_dir(load_config())
    before = load(served).meta
    ready = tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, "x", where, str(ready)],
                            cwd=REPO, env=os.environ.copy())
    deadline = time.monotonic() + 120
    while not ready.exists():
        assert proc.poll() is None, "the training run ended before the kill point"
        assert time.monotonic() < deadline
        time.sleep(0.1)
    # Killed with the new version half-written (fsync) or complete but not yet swapped in.
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    after = load(served)
    assert after.meta == before
    assert list(served.parent.glob(f".{served.name}.*")), "the killed run left its temp dir"
    # The next run swaps and clears the leftovers.
    code, out, _ = _run("predictor", "retrain", "--no-import", "--force", "--json")
    assert code == 0 and json.loads(out)["swapped"]
    versions = [p for p in served.parent.glob(f".{served.name}.*") if p.is_dir()]
    assert versions == [served.resolve()]


def test_time_limit_forms_as_sbatch_reads_them() -> None:
    assert [parse_time_limit(t) for t in ("30", "30:15", "1:30:00", "2-3", "2-3:04",
                                          "2-3:04:05", "UNLIMITED")] == [
        1800, 1815, 5400, 183600, 183840, 183845, None]
    with pytest.raises(ValueError, match="is not a Slurm time"):
        parse_time_limit("1h")


@pytest.mark.live
def test_sacct_import_from_the_live_cluster(slurm: Slurm, state_dir: Path) -> None:
    name = f"arnoldhist-{uuid.uuid4().hex[:6]}"
    job_id = slurm.submit(["-N", "1", "-t", "3", "-J", name, "-o", "/dev/null"],
                          "#!/bin/bash\nsleep 1\n")
    assert wait_for_job(slurm, job_id) == "COMPLETED"
    deadline = time.monotonic() + 60
    found: list[JobRecord] = []
    while not found and time.monotonic() < deadline:
        code, _, err = _run("predictor", "import", "sacct", "--since", "now-1days")
        assert code == 0, err
        found = [j for j in load_history(StateDB(state_dir / "arnold.db", journal="delete"))
                 if j.job_id == str(job_id)]
        time.sleep(0.5)
    assert found, f"job {job_id} never reached the history"
    job = found[0]
    assert (job.user, job.name, job.state, job.time_limit, job.nodes) == (
        getpass.getuser(), name, "COMPLETED", 180, 1)
    assert job.submit <= (job.start or 0) <= (job.end or 0)
    assert (job.end or 0) - (job.start or 0) >= 1
    code, _, err = _run("predictor", "import", "sacct")
    assert code == 0 and "imported 0 new jobs" in err


def test_bench_predictor_quick(state_dir: Path) -> None:
    code, out, err = _run("bench", "predictor", "--quick", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["jobs"] == 5000 and doc["train_total_s"] > 0
    assert 0 < doc["single_ms_p50"] <= doc["single_ms_p95"]


@pytest.mark.live
def test_predict_a_pending_job_of_the_live_queue(slurm: Slurm, state_dir: Path,
                                                 tmp_path: Path) -> None:
    _run("predictor", "import", "swf", str(_swf(tmp_path / "a.swf")))
    _run("predictor", "retrain", "--no-import")
    job_id = slurm.submit(["--hold", "-N", "1", "-t", "45", "-o", "/dev/null"],
                          "#!/bin/bash\ntrue\n")
    try:
        code, out, err = _run("predictor", "predict", "--job", str(job_id), "--json")
    finally:
        slurm.cancel(job_id)
    assert code == 0, err
    pred = json.loads(out)
    assert pred["requested_s"] == 2700 and pred["upper_s"] <= 2700
    code, _, err = _run("predictor", "predict", "--job", "999999999")
    assert code == 1 and "not in the queue" in err


def test_schedule_examples_run_real_commands() -> None:
    """Every command line of the example cron, scrontab and systemd files names a real
    command with real options; every cron line has five time fields."""
    examples = REPO / "site_config" / "schedule"
    seen = 0
    for path in sorted(examples.iterdir()):
        for line in path.read_text().splitlines():
            if line.startswith("#") or "/opt/slurm-arnold/bin/arnold " not in line:
                continue
            # A line may run several of ours, one after the other ("; ").
            for command in line.split("/opt/slurm-arnold/bin/arnold ")[1:]:
                seen += 1
                argv = re.split(r">>|;|&&", command)[0].split()
                # The command's words (`reserve sync`, or just `report`), then its options.
                words = 1 + (len(argv) > 1 and not argv[1].startswith("-"))
                result = CliRunner().invoke(main, [*argv[:words], "--help"])
                assert result.exit_code == 0, (path.name, line, result.output)
                options = [a for a in argv[words:] if a.startswith("--")]
                assert all(o in result.output for o in options), (path.name, line,
                                                                  result.output)
            if path.suffix in (".scrontab", ".cron"):
                fields = line.split()[:5]
                assert all(f == "*" or f.isdigit() for f in fields), (path.name, line)
    # retrain: scrontab, service; reserve sync and then report: scrontab, cron, service
    assert seen == 8
