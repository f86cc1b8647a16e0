"""The report as one self-contained HTML page (Jinja2; inline SVG and CSS, nothing fetched).

The fat tree is drawn one minipod per row, its leaves side by side, each node a square sized
so that the widest minipod fits ``WIDTH`` pixels (a 1280-pixel screen): 64 nodes get large
squares, 12,500 small ones, and every square keeps its node, state and job in ``data-``
attributes and a tooltip.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import hostlist
from jinja2 import Environment, PackageLoader, select_autoescape

from slurm_arnold.report.gather import Report

WIDTH = 1200
LABEL_W = 70
GAP = 6
MAX_CELL = 22
MIN_CELL = 5
#: Fill of each node state (an arnold job's nodes take their stage's colour instead).
COLOURS = {"arnold": "#4c78a8", "reserved": "#f2a541", "busy": "#9aa3ad", "free": "#e6e6e6",
           "drained": "#222222", "down": "#d62728"}
#: Pipeline stages' colours (stage s: STAGE_COLOURS[s % len]).
STAGE_COLOURS = ("#4c78a8", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7", "#9c755f",
                 "#e15759")


def _clock(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "?"


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def tree(report: Report) -> dict[str, Any]:
    """Squares and labels of the fat tree: a row per minipod, a block per leaf, each leaf's
    nodes in as few lines (``k``) as keep the squares at least ``MIN_CELL`` pixels."""
    topo = report.topology
    pods: dict[str, dict[str, list[str]]] = {}
    for node in topo.nodes:
        pods.setdefault(topo.minipod_of(node), {}).setdefault(topo.leaf_of(node), []).append(node)
    widest_leaves = max(len(leaves) for leaves in pods.values())
    usable = WIDTH - LABEL_W - GAP * widest_leaves
    for k in range(1, 1 + max(len(n) for leaves in pods.values() for n in leaves.values())):
        columns = max(sum(math.ceil(len(n) / k) for n in leaves.values())
                      for leaves in pods.values())
        cell = min(MAX_CELL, usable // max(1, columns))
        if cell >= MIN_CELL:
            break
    cell = max(2, cell)
    pad = 1 if cell >= 6 else 0
    rects, labels = [], []
    y = 4
    for pod, leaves in pods.items():
        height = max(k * cell, 14)
        labels.append({"x": 0, "y": y + min(height, k * cell) / 2 + 4, "text": pod})
        x = LABEL_W
        for nodes in leaves.values():
            for i, name in enumerate(nodes):
                rects.append(_rect(report, name, x + (i // k) * cell, y + (i % k) * cell, pad))
            x += math.ceil(len(nodes) / k) * cell + GAP
        y += height + GAP
    return {"rects": rects, "labels": labels, "cell": cell - pad, "width": WIDTH,
            "height": y, "lines_per_leaf": k}


def _rect(report: Report, name: str, x: int, y: int, pad: int) -> dict[str, Any]:
    node = report.nodes[name]
    fill, stroke = COLOURS[node.state], None
    title = f"{name} ({node.leaf}, {node.minipod}): {node.state}"
    if node.state == "arnold" and node.stage is not None:
        fill = STAGE_COLOURS[node.stage % len(STAGE_COLOURS)]
        title += f", job {node.job_id} ({node.user}) stage {node.stage} replica {node.replica}"
    elif node.job_id is not None:
        title += f", job {node.job_id} ({node.user})"
    if node.reservation:
        title += f", in {node.reservation}"
        if node.state != "reserved":
            stroke = COLOURS["reserved"]
    if node.reason:
        title += f" [{node.reason}]"
    return {"name": name, "state": node.state, "job": node.job_id, "stage": node.stage,
            "replica": node.replica, "reservation": node.reservation, "x": x + pad,
            "y": y + pad, "fill": fill, "stroke": stroke, "title": title}


def calibration(report: Report, size: int = 260) -> dict[str, Any] | None:
    """The recent jobs' point predictions against their run times, on log axes."""
    points = report.predictor.get("points") or []
    if not points:
        return None
    values = [v for p, _, a in points for v in (p, a) if v > 0]
    low, high = math.log10(max(1.0, min(values))), math.log10(max(values) * 1.05 + 1)
    span = max(high - low, 1e-6)

    def at(v: float) -> float:
        return (math.log10(max(v, 1.0)) - low) / span * size

    return {"size": size, "low": f"{10 ** low:.0f} s", "high": f"{10 ** high:.0f} s",
            "points": [{"x": round(40 + at(a), 1), "y": round(10 + size - at(p), 1),
                        "fill": "#4c78a8" if not u or a <= u else "#d62728",
                        "title": f"predicted {p:.0f} s (upper {u:.0f} s), ran {a:.0f} s"}
                       for p, u, a in points]}


def render(report: Report, *, title: str = "the cluster", refresh: int | None = 60) -> str:
    """The page's HTML."""
    env = Environment(loader=PackageLoader("slurm_arnold.report", "templates"),
                      autoescape=select_autoescape(["html", "j2"]), trim_blocks=False)
    env.globals.update(hostlist=lambda nodes: hostlist.collect_hostlist(list(nodes))
                       if nodes else "-", clock=_clock, age=_age)
    counts = report.counts()
    return env.get_template("report.html.j2").render(
        report=report, title=title, refresh=refresh, made=_clock(report.generated_at),
        counts=counts, colours=COLOURS, tree=tree(report),
        pods=report.topology.minipods(), nodes_total=len(report.nodes),
        model=report.predictor.get("model"), last=report.predictor.get("last_retrain"),
        recent=report.predictor.get("recent"), calibration=calibration(report))


def write(report: Report, directory: Path, **kwargs: Any) -> Path:
    """Write ``index.html`` into ``directory`` (atomically, by rename); its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "index.html"
    tmp = directory / ".index.html.tmp"
    tmp.write_text(render(report, **kwargs))
    tmp.chmod(0o644)
    tmp.replace(path)
    return path
