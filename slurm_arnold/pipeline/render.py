"""A schedule drawn: a text timeline for the terminal and a PNG Gantt chart."""

from __future__ import annotations

from pathlib import Path

from slurm_arnold.figures import save_figure
from slurm_arnold.pipeline.model import PipelineModel
from slurm_arnold.pipeline.simulate import Result

COLOURS = {"F": "#4e79a7", "B": "#f28e2b", "W": "#59a14f"}


def timeline(model: PipelineModel, result: Result, width: int = 100) -> str:
    """One line per stage, ``width`` columns for the makespan: F, B, W where a block runs
    (the letter of whatever runs most of the column), ``.`` where the stage waits."""
    scale = width / result.makespan
    lines = []
    for s in range(model.stages):
        cells = [(0.0, ".")] * width
        for (stage, block), (start, end) in result.times.items():
            if stage != s:
                continue
            first, last = int(start * scale), min(width - 1, int(end * scale - 1e-9))
            for col in range(first, last + 1):
                covered = min(end, (col + 1) / scale) - max(start, col / scale)
                if covered > cells[col][0]:
                    cells[col] = (covered, block.kind)
        lines.append(f"stage {s:>2} |" + "".join(c for _, c in cells) + "|")
    lines.append(f"{'':9}0{'':>{width - 1}}{result.makespan:g}")
    return "\n".join(lines)


def gantt(model: PipelineModel, result: Result, path: Path, title: str) -> None:
    """A PNG Gantt chart: a row per stage, a box per block labelled with its micro-batch, the
    critical path outlined."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    fig, ax = plt.subplots(figsize=(max(8.0, min(30.0, result.makespan / 2)),
                                    1 + 0.5 * model.stages))
    critical = {(st.stage, st.block) for st in result.critical_path}
    for (stage, block), (start, end) in result.times.items():
        on_path = (stage, block) in critical
        ax.barh(stage, end - start, left=start, height=0.8, color=COLOURS[block.kind],
                edgecolor="black" if on_path else "white", linewidth=1.5 if on_path else 0.5)
        if (end - start) * 40 / result.makespan > 0.6:
            ax.text((start + end) / 2, stage, str(block.mb), ha="center", va="center",
                    fontsize=6, color="white")
    ax.set_yticks(range(model.stages))
    ax.set_yticklabels([f"stage {s}" for s in range(model.stages)])
    ax.invert_yaxis()
    ax.set_xlabel("time (unit of --tf)")
    for s in sorted(model.cross_links):
        ax.axhline(s + 0.5, color="red", linestyle="--", linewidth=0.8)
    ax.set_title(title)
    handles = [Rectangle((0, 0), 1, 1, color=c) for c in COLOURS.values()]
    ax.legend(handles, list(COLOURS), loc="upper right", fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, "--gantt", dpi=120)
