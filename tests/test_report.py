"""``arnold report``: the admins' page (checked in headless Chromium) and the Prometheus
metrics (checked with the Prometheus client library's own parser)."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import hostlist
import pytest
from prometheus_client.parser import text_string_to_metric_families

from slurm_arnold.slurm import Slurm
from tests.test_reserve_live import arnold, env, fill, sbatch, wait_state  # noqa: F401

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
#: Where the live test leaves its screenshot (a test artefact; not committed).
ARTEFACTS = Path(os.environ.get("ARNOLD_TEST_ARTEFACTS", REPO / "test-artefacts"))


class _Dom(HTMLParser):
    """Every element's attributes by tag, from Chromium's --dump-dom."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}))

    def all(self, tag: str, **where: str) -> list[dict[str, str]]:
        return [a for t, a in self.elements if t == tag
                and all(a.get(k.replace("_", "-")) == v for k, v in where.items())]


def chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        pytest.skip("no headless browser: apt-get install chromium (make test does)")
    return found


def browse(page: Path, screenshot: Path | None = None) -> tuple[_Dom, list[str]]:
    """The page's DOM after its scripts ran, and every console message it printed."""
    common = [chromium(), "--headless=new", "--no-sandbox", "--disable-gpu",
              "--hide-scrollbars", "--window-size=1280,800", "--enable-logging=stderr",
              "--v=0", "--virtual-time-budget=3000"]
    proc = subprocess.run([*common, "--dump-dom", page.as_uri()], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    if screenshot is not None:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        shot = subprocess.run([*common, f"--screenshot={screenshot}", page.as_uri()],
                              capture_output=True, text=True, timeout=120)
        assert shot.returncode == 0 and screenshot.stat().st_size > 0, shot.stderr[-2000:]
    dom = _Dom()
    dom.feed(proc.stdout)
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return dom, console


def test_the_console_check_sees_a_broken_page(tmp_path: Path) -> None:
    # The control for the live test's "no console errors": a page that throws is caught.
    page = tmp_path / "broken.html"
    page.write_text("<html><body><script>console.error('control'); missing();</script>"
                    "</body></html>")
    _, console = browse(page)
    assert any("control" in line for line in console)
    assert any("Uncaught ReferenceError" in line for line in console)


def metric_families(text: str) -> dict[str, Any]:
    """Parsed by Prometheus' own parser; every family must carry HELP and TYPE."""
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name, family in families.items():
        assert family.documentation, f"{name} has no HELP"
        assert family.type in ("gauge", "counter", "summary", "histogram"), name
        assert f"# TYPE {name} {family.type}" in text and f"# HELP {name} " in text
    return families


def test_metrics_and_page_of_a_topology_file_alone(tmp_path: Path) -> None:
    topo = tmp_path / "topology.conf"
    topo.write_text("SwitchName=l0 Nodes=a[1-4]\nSwitchName=l1 Nodes=a[5-8]\n"
                    "SwitchName=p0 Switches=l[0-1]\nSwitchName=l2 Nodes=b[1-4]\n"
                    "SwitchName=p1 Switches=l2\nSwitchName=core Switches=p[0-1]\n")
    proc = subprocess.run([str(BIN / "arnold"), "report", "--topology", str(topo), "--html",
                           str(tmp_path / "out"), "--metrics", "-"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    families = metric_families(proc.stdout)
    nodes = {s.labels["state"]: s.value for s in families["arnold_nodes"].samples}
    assert nodes == {"arnold": 0, "reserved": 0, "busy": 0, "free": 12, "drained": 0,
                     "down": 0}
    dom, console = browse(tmp_path / "out" / "index.html")
    assert not console, console
    rects = dom.all("rect", data_state="free")
    assert sorted(r["data-node"] for r in rects) == sorted(
        hostlist.expand_hostlist("a[1-8],b[1-4]"))
    assert dom.all("body")[0].get("data-render-ms", "").isdigit()


def test_report_needs_somewhere_to_write() -> None:
    proc = subprocess.run([str(BIN / "arnold"), "report"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "give --html DIR, --metrics FILE or both" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.live
def test_the_page_shows_a_placed_job_a_reservation_with_an_admitted_job_and_a_drained_node(
        slurm: Slurm, env: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    drained = "n064"
    slurm.run(["scontrol", "update", f"NodeName={drained}", "State=DRAIN",
               "Reason=arnold-report-test"])
    try:
        # n[001-040] busy until the test ends; the LPJ waits for n[033-056] in a reservation
        # (16 of them idle); our job takes 4 of the 7 free nodes left; a short 4-node job
        # then fits nowhere but in the reservation, where sync admits it.
        fill(40, limit_min=4, seconds=200)  # cancelled by the fixture: never ends mid-test
        lpj = sbatch("-N24", "--exclusive", "--gres=gpu:8", "--time=3", "-w", "n[033-056]",
                     "--wrap", "sleep 1")
        wait_state(slurm, lpj, {"PENDING"})
        assert f"created arnold_{lpj} on 24 nodes for job {lpj}" in json.loads(
            arnold(env, "reserve", "sync", "--json").stdout)
        placed = subprocess.run(
            [str(BIN / "arnold-sbatch"), "--parsable", "-N4", "--exclusive",
             "--gpus-per-node=8", "--ntasks-per-node=8", "-t", "5", "-o", "/dev/null",
             "--tp", "8", "--pp", "2", "--wrap", "sleep 120"],
            capture_output=True, text=True, env=env)
        assert placed.returncode == 0, placed.stderr
        ours = int(placed.stdout)
        running = wait_state(slurm, ours, {"RUNNING"})
        short = sbatch("-N4", "--exclusive", "--gres=gpu:8", "--time=1", "--wrap", "sleep 60")
        wait_state(slurm, short, {"PENDING"})
        actions = json.loads(arnold(env, "reserve", "sync", "--json").stdout)
        assert any(a.startswith(f"admitted job {short} into arnold_{lpj}") for a in actions)
        wait_state(slurm, short, {"RUNNING"})
        out, metrics = tmp_path / "page", tmp_path / "arnold.prom"
        arnold(env, "report", "--html", str(out), "--metrics", str(metrics))

        shot = ARTEFACTS / "report-live.png"
        dom, console = browse(out / "index.html", shot)
        assert not console, console
        by_node = {r["data-node"]: r for r in dom.all("rect")}
        assert len(by_node) == 64
        mine = {n: r for n, r in by_node.items() if r.get("data-job") == str(ours)}
        assert set(mine) == set(running.nodes)
        assert {r["data-state"] for r in mine.values()} == {"arnold"}
        assert {r["data-stage"] for r in mine.values()} == {"0", "1"}  # PP 2
        assert len({r["fill"] for r in mine.values()}) == 2  # one colour per stage
        assert by_node[drained]["data-state"] == "drained"
        assert by_node[drained]["fill"] == "#222222"
        row = dom.all("tr", data_reservation=f"arnold_{lpj}")
        assert len(row) == 1 and row[0]["data-nodes"] == "n[033-056]"
        assert dom.all("span", data_admitted=str(short))
        reserved_idle = [n for n, r in by_node.items() if r["data-state"] == "reserved"]
        short_nodes = {n for n, r in by_node.items() if r.get("data-job") == str(short)}
        assert len(short_nodes) == 4 and all(
            by_node[n].get("data-reservation") == f"arnold_{lpj}" for n in short_nodes)
        assert len(reserved_idle) == 12  # 16 idle reserved nodes, 4 taken by the short job
        assert dom.all("tr", data_job=str(ours))
        assert re.fullmatch(r"\d+", dom.all("body")[0].get("data-render-ms", ""))

        families = metric_families(metrics.read_text())
        assert families["arnold_reservations_active"].samples[0].value == 1
        states = {s.labels["state"]: s.value for s in families["arnold_nodes"].samples}
        assert states["drained"] == 1 and states["arnold"] == 4 and states["reserved"] == 12
        spreads = [s for s in families["arnold_job_weighted_spread"].samples
                   if s.labels["job_id"] == str(ours)]
        assert len(spreads) == 1 and spreads[0].value > 0
        admits = {s.labels["decision"]: s.value for s in families["arnold_admissions"].samples}
        assert admits["admit"] >= 1
        assert time.time() - families["arnold_report_timestamp_seconds"].samples[0].value < 120
    finally:
        slurm.run(["scontrol", "update", f"NodeName={drained}", "State=RESUME"], check=False)


def test_the_predictor_section_measures_recent_decisions_against_their_run_times(
        tmp_path: Path) -> None:
    from site_config import SiteConfig
    from slurm_arnold.report.gather import _predictor, gather
    from slurm_arnold.report.page import render
    from slurm_arnold.state import StateDB
    from slurm_arnold.topology import parse_topology

    config = SiteConfig(state_dir=tmp_path)
    state = StateDB(tmp_path / "site.db")
    # Three decided jobs that finished: 100 s predicted (upper 200) ran 100 s; 100 s (upper
    # 150) ran 400 s; 1000 s (upper 2000) ran 10 s. One decided job not finished yet.
    rows = [(1, 100.0, 200.0, 100), (2, 100.0, 150.0, 400), (3, 1000.0, 2000.0, 10),
            (4, 50.0, 60.0, None)]
    with state.transaction() as db:
        for job_id, point, upper, ran in rows:
            db["admissions"].insert({  # type: ignore[union-attr]
                "job_id": job_id, "user": "u", "reservation": "arnold_9", "decision": "admit",
                "source": "sync", "predictor": "model_q", "predicted_s": point,
                "upper_s": upper, "expected_start": 0.0, "mode": "share",
                "time_limit_min": 60, "decided_at": float(job_id),
                "last_decided_at": float(job_id), "times": 1})
            if ran is not None:
                db["history"].insert({  # type: ignore[union-attr]
                    "source": "sacct", "job_id": str(job_id), "user": "u", "submit": 0,
                    "start": 1000, "end": 1000 + ran, "nodes": 1, "gpus": 8, "procs": 8,
                    "time_limit": 3600, "state": "COMPLETED", "exit_code": 0})
    shown = _predictor(config, state.db.conn, time.time())
    state.close()
    recent = shown["recent"]
    assert recent["jobs"] == 3
    expected = (0 + math.log(4) + math.log(100)) / 3
    assert recent["mae_log"] == pytest.approx(expected, abs=1e-3)
    assert recent["coverage"] == pytest.approx(2 / 3, abs=1e-3)  # job 2 outran its upper
    topo = parse_topology("SwitchName=l0 Nodes=a[1-2]\nSwitchName=p0 Switches=l0\n"
                          "SwitchName=core Switches=p0\n", "t")
    report = gather(config, topology=topo)
    report.predictor = shown
    dom = _Dom()
    dom.feed(render(report))
    dots = dom.all("circle")
    assert len(dots) == 3
    assert sorted(d["fill"] for d in dots) == ["#4c78a8", "#4c78a8", "#d62728"]


def test_a_waiting_job_is_explained_in_words() -> None:
    from slurm_arnold.report.gather import _why
    from slurm_arnold.slurm import JobInfo
    from slurm_arnold.topology import parse_topology

    topo = parse_topology("SwitchName=l0 Nodes=a[1-2]\nSwitchName=l1 Nodes=a[3-4]\n"
                          "SwitchName=p0 Switches=l0\nSwitchName=p1 Switches=l1\n"
                          "SwitchName=core Switches=p[0-1]\n", "t")

    def job(**kw: Any) -> JobInfo:
        base: dict[str, Any] = {"job_id": 5, "name": "n", "user": "u", "state": "PENDING",
                                "nodes": (), "partition": "p", "time_limit_min": 10,
                                "start_time": None, "end_time": None, "reservation": None,
                                "node_count": 3}
        return JobInfo(**(base | kw))

    now = 1000.0
    reserved = {"arnold_5": {"nodes": ["a1", "a2", "a3"], "expected_start": now + 720}}
    assert _why(job(reservation="arnold_5"), topo, reserved, now) == (
        "reserved on its 3 nodes, expected to start in ~12 min")
    assert _why(job(required_nodes=("a1", "a3", "a4"), reason="Resources"), topo, {}, now) == (
        "waiting for its 3 planned nodes in 2 minipods to drain")
    assert _why(job(required_nodes=("a1",), reason="Priority"), topo, {}, now) == (
        "waiting behind higher-priority jobs for its 1 planned node in 1 minipod to drain")
    assert _why(job(reason="JobHeldUser"), topo, {}, now).startswith("held")
    assert _why(job(reason="Resources"), topo, {}, now) == (
        "waiting for 3 nodes to become free")
    assert _why(job(reason="Dependency"), topo, {}, now) == "Slurm says: Dependency"
