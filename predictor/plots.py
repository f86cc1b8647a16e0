"""The calibration plot of ``arnold predictor evaluate --plot``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from slurm_arnold.figures import save_figure


def calibration_plot(pred: Mapping[str, np.ndarray], path: Path) -> None:
    """Predicted vs actual run time (log-log) per method, and coverage by predicted decile."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    actual = np.maximum(pred["actual"], 1.0) / 3600
    methods = [m for m in ("requested", "last2", "model", "model_q") if m in pred]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.8))
    scatter, cover = axes
    lo, hi = float(actual.min()), float(max(actual.max(), 1.0))
    for name in methods:
        values = np.maximum(pred[name], 1.0) / 3600
        scatter.scatter(values, actual, s=3, alpha=0.25, label=name)
        # Coverage per decile of the prediction: a calibrated q-model sits near q everywhere.
        edges = np.quantile(values, np.linspace(0, 1, 11))
        bins = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, 9)
        mids = [float(np.median(values[bins == b])) for b in range(10) if np.any(bins == b)]
        share = [float(np.mean(values[bins == b] >= actual[bins == b]))
                 for b in range(10) if np.any(bins == b)]
        cover.plot(mids, share, marker="o", label=name)
    scatter.plot([lo, hi], [lo, hi], color="black", linewidth=1)
    scatter.set(xscale="log", yscale="log", xlabel="predicted (h)", ylabel="actual (h)",
                title="predicted vs actual run time")
    scatter.legend(markerscale=4)
    cover.set(xscale="log", xlabel="predicted (h), decile median", ylabel="share covered",
              title="coverage by predicted decile", ylim=(0, 1.02))
    cover.legend()
    fig.tight_layout()
    save_figure(fig, path, "--plot", dpi=110)
