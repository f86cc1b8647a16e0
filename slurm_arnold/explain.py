"""``--explain``: our placement beside Slurm's own choice, as a text table and a picture.

The picture (SVG, or PNG when the path ends in ``.png``) draws every minipod either placement
uses as a row, its leaf switches side by side, each node a square: coloured by the pipeline
stage it holds, labelled with its data-parallel replica; grey when free but unused, hatched
when busy. Our layout on the left, Slurm's on the right, each titled with its spreads.
"""

from __future__ import annotations

import io
import math
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import hostlist
from rich.console import Console
from rich.table import Table

from slurm_arnold.figures import save_figure
from slurm_arnold.placement import JobShape, Placement
from slurm_arnold.placement.baselines import slurm_sort_key, topo_aware
from slurm_arnold.placement.engine import place_from_node_list
from slurm_arnold.slurm import Slurm
from slurm_arnold.snapshot.live import slurm_choice
from slurm_arnold.snapshot.view import ClusterView
from slurm_arnold.topology import Topology

MAX_PODS_DRAWN = 8


def slurm_reference(view: ClusterView, job: JobShape, alpha: float,
                    slurm: Slurm | None) -> Placement:
    """What Slurm would do with the job: live, slurmctld's own answer (``sbatch --test-only``)
    in its node order with Megatron's default ranks; offline, topology/tree's rule (the lowest
    switch with room, best fit) modelled on the free nodes."""
    if slurm is not None:
        nodes = slurm_choice(slurm, view, job.nodes, segment=job.nodes_per_unit)
        return place_from_node_list("slurm", nodes, view.topology, job, alpha)
    chosen = topo_aware(view.topology, sorted(view.free, key=slurm_sort_key), job,
                        random.Random(0))
    return place_from_node_list("slurm (modelled)", sorted(chosen, key=slurm_sort_key),
                                view.topology, job, alpha)


def table(ours: Placement, theirs: Placement, topology: Topology) -> str:
    """One row per minipod either uses: nodes per stage, ours and Slurm's; then spreads."""
    pods = _pods_used(topology, [ours, theirs])
    rows = []
    for pod in pods:
        cells = []
        for placement in (ours, theirs):
            stages: dict[int, list[str]] = {}
            for (pp, _), nodes in placement.cells.items():
                for n in nodes:
                    if topology.minipod_of(n) == pod:
                        stages.setdefault(pp, []).append(n)
            cells.append("; ".join(f"stage {pp}: {hostlist.collect_hostlist(ns)}"
                                   for pp, ns in sorted(stages.items())) or "-")
        rows.append([pod, *cells])
    grid = Table("minipod", ours.algo, theirs.algo, box=None, pad_edge=False)
    for row in rows:
        grid.add_row(*row)
    console = Console(file=io.StringIO(), width=160, color_system=None)
    console.print(grid)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    return str(out) + "\n".join(_spreads(p) for p in (ours, theirs))


def _spreads(p: Placement) -> str:
    m = p.metrics
    return (f"{p.algo}: max DP spread {m.max_dp_spread}, max PP spread {m.max_pp_spread}, "
            f"weighted {m.weighted_spread:g}, minipods used {m.minipods_used}")


def _pods_used(topology: Topology, placements: Iterable[Placement]) -> list[str]:
    used = {topology.minipod_of(n) for p in placements for n in p.nodes()}
    return [pod for pod in topology.minipods() if pod in used]


def picture(ours: Placement, theirs: Placement, view: ClusterView, path: Path) -> Path:
    """Draw both placements side by side; SVG unless ``path`` ends in ``.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    topo = view.topology
    pods = _pods_used(topo, [ours, theirs])
    hidden = max(0, len(pods) - MAX_PODS_DRAWN)
    pods = pods[:MAX_PODS_DRAWN]
    leaves = {pod: [lf for lf in topo.leaves() if topo.minipod_of(topo.nodes_under(lf)[0])
                    == pod] for pod in pods}
    per_row = 4
    leaf_rows = max(math.ceil(len(topo.nodes_under(lf)) / per_row)
                    for pod in pods for lf in leaves[pod])
    width_leaves = max(len(v) for v in leaves.values())
    fig_w = max(6.0, 1.4 * per_row * width_leaves / 2.2)
    fig, axes = plt.subplots(1, 2, figsize=(2 * fig_w, 1.0 + 0.45 * leaf_rows * len(pods) + 0.6))
    stages = max(ours.job.pp, 1)
    cmap = plt.get_cmap("tab10" if stages <= 10 else "tab20")
    for ax, placement in zip(axes, (ours, theirs), strict=True):
        where = {n: cell for cell, nodes in placement.cells.items() for n in nodes}
        y = 0.0
        for pod in pods:
            x = 0.0
            for lf in leaves[pod]:
                nodes = topo.nodes_under(lf)
                for k, node in enumerate(nodes):
                    cx, cy = x + (k % per_row), y - (k // per_row)
                    cell = where.get(node)
                    face: Any
                    hatch: str | None
                    if cell is not None:
                        face, hatch = cmap(cell[0] % cmap.N), None
                    elif node in view.free:
                        face, hatch = "#eeeeee", None
                    else:
                        face, hatch = "#bbbbbb", "///"
                    ax.add_patch(Rectangle((cx, cy), 0.9, 0.9, facecolor=face,
                                           edgecolor="#555555", hatch=hatch, linewidth=0.5))
                    if cell is not None:
                        ax.text(cx + 0.45, cy + 0.45, str(cell[1]), ha="center",
                                va="center", fontsize=6)
                ax.text(x + per_row / 2 - 0.05, y + 1.05, lf, ha="center", fontsize=6)
                x += per_row + 0.6
            ax.text(-0.4, y + 0.45, pod, ha="right", va="center", fontsize=7,
                    fontweight="bold")
            y -= leaf_rows + 1.2
        m = placement.metrics
        ax.set_title(f"{placement.algo}: DP spread {m.max_dp_spread}, PP spread "
                     f"{m.max_pp_spread}, weighted {m.weighted_spread:g}", fontsize=9)
        ax.set_xlim(-3.0, width_leaves * (per_row + 0.6))
        ax.set_ylim(y + leaf_rows, 2.0)
        ax.set_aspect("equal")
        ax.axis("off")
    handles = [Rectangle((0, 0), 1, 1, facecolor=cmap(s % cmap.N)) for s in range(stages)]
    fig.legend(handles, [f"stage {s}" for s in range(stages)], loc="lower center",
               ncol=min(stages, 8), fontsize=7, frameon=False)
    note = f" ({hidden} more minipods not drawn)" if hidden else ""
    fig.suptitle(f"TP{ours.job.tp} x PP{ours.job.pp} x DP{ours.job.dp} on {ours.job.nodes} "
                 f"nodes: colour = stage, number = replica; grey free, hatched busy{note}",
                 fontsize=9, y=1.0, va="bottom")  # above the panels' own titles, never on them
    return save_figure(fig, path, "--picture (or --explain=PATH)",
                       format="png" if path.suffix.lower() == ".png" else "svg", dpi=120,
                       bbox_inches="tight")
