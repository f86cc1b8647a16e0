"""``arnold bench report``: the admins' page's size and render time in headless Chromium, at
the local cluster's 64 nodes and at 12,500 nodes (the placement suite's largest synthetic fat
tree), every node free.

Render time is what the page itself reports: ``performance.now()`` once its load event has run
(``data-render-ms`` on ``<body>``), read back from Chromium's ``--dump-dom``; the median of
``RUNS`` fresh browser runs. A screenshot of each at 1280x800 goes beside the docs.
"""

from __future__ import annotations

import random
import re
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.clusters import SCALES, build_tree
from site_config import SiteConfig
from slurm_arnold.errors import ArnoldError
from slurm_arnold.report.gather import gather
from slurm_arnold.report.page import write
from slurm_arnold.topology import Topology, parse_topology

RUNS = 3
WINDOW = "1280,800"


def local_shape(minipods: int = 4, leaves: int = 4, nodes: int = 4) -> Topology:
    """The local cluster's fat tree (site_config/devcluster's default shape)."""
    lines, leaf = [], 0
    for pod in range(minipods):
        first = leaf
        for _ in range(leaves):
            lo = leaf * nodes + 1
            lines.append(f"SwitchName=leaf{leaf:02d} Nodes=n[{lo:03d}-{lo + nodes - 1:03d}]")
            leaf += 1
        lines.append(f"SwitchName=pod{pod} Switches=leaf[{first:02d}-{leaf - 1:02d}]")
    lines.append(f"SwitchName=core Switches=pod[0-{minipods - 1}]")
    return parse_topology("\n".join(lines) + "\n", "local shape")


def _chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        raise ArnoldError("no chromium; apt-get install chromium (make test installs it)")
    return found


def _render_ms(page: Path) -> int:
    proc = subprocess.run([_chromium(), "--headless=new", "--no-sandbox", "--disable-gpu",
                           f"--window-size={WINDOW}", "--virtual-time-budget=5000",
                           "--dump-dom", page.as_uri()], capture_output=True, text=True,
                          timeout=300)
    match = re.search(r'<body[^>]*data-render-ms="(\d+)"', proc.stdout)
    if proc.returncode != 0 or match is None:
        raise ArnoldError(f"chromium did not render {page}: {proc.stderr.strip()[-300:]}")
    return int(match.group(1))


def measure(name: str, topology: Topology, out: Path, shots: Path | None) -> dict[str, Any]:
    """One page: its bytes, nodes and median render time (and a screenshot into ``shots``)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = gather(SiteConfig(state_dir=Path(tmp)), topology=topology)
    page = write(report, out / name, title=f"{len(topology.nodes):,} nodes", refresh=None)
    times = [_render_ms(page) for _ in range(RUNS)]
    if shots is not None:
        shot = shots / f"report-{name}.png"
        subprocess.run([_chromium(), "--headless=new", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", f"--window-size={WINDOW}", f"--screenshot={shot}",
                        page.as_uri()], capture_output=True, timeout=300, check=True)
    return {"name": name, "nodes": len(topology.nodes), "bytes": page.stat().st_size,
            "render_ms": statistics.median(times), "runs_ms": times}


def run(quick: bool = False, shots: Path | None = None) -> dict[str, Any]:
    """Both pages (``quick``: the 64-node one only)."""
    pages = [("64", local_shape())]
    if not quick:
        pages.append(("12500", build_tree(SCALES["100k"], random.Random(0))))
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(name, topo, Path(tmp), shots) for name, topo in pages]
    return {"pages": rows, "window": WINDOW, "runs": RUNS}


def markdown(result: dict[str, Any], command: str) -> str:
    """The report section of docs/benchmarks.md."""
    lines = ["## The admins' page: size and render time", "",
             f"Measured with `{command}`: `arnold report` pages of every node free, opened in "
             f"headless Chromium at {result['window'].replace(',', 'x')}; render time is the "
             f"page's own `performance.now()` after its load event, median of {result['runs']} "
             "fresh browser runs. Screenshots: `docs/report-64.png`, `docs/report-12500.png`.",
             "", "| nodes | page size | render time (median) | runs |", "|---|---|---|---|"]
    for r in result["pages"]:
        lines.append(f"| {r['nodes']:,} | {r['bytes'] / 1024:.0f} KiB | {r['render_ms']:.0f} ms "
                     f"| {', '.join(str(t) for t in r['runs_ms'])} ms |")
    return "\n".join(lines)
