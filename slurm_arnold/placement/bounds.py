"""Lower bounds on the weighted spread that need no solver.

For spreads (a, b) to be possible, the units must fit the minipods with every DP group in at
most a of them and every pipeline in at most b. Let rho_p be the stages (rows) and gamma_p the
pipelines (columns) that touch minipod p: p holds at most min(cap_p, rho_p * gamma_p) units,
sum rho_p <= a * PP and sum gamma_p <= b * D'. If even the best choice of rho and gamma holds
fewer than PP * D' units, (a, b) is impossible.

That maximum is bounded from above by a Lagrangian relaxation of the pipeline budget: for a
multiplier lam >= 0 and gamma continuous, a minipod given rho rows is worth
max(0, min(cap, rho * D') - lam * min(D', cap / rho)) when rho > lam, and a knapsack over
rows (dynamic program on numpy arrays) picks the rho_p. Any lam gives a valid bound; we take the
smallest over a grid. The product rho * gamma is what the MIP's linear relaxation cannot see,
which is why this bound is often far stronger than SCIP's root bound.

Only the L = min(#minipods, PP * a, D' * b) largest minipods need to be considered: a placement
with those spreads uses at most L minipods, and moving it to the L largest never hurts.

Where the Lagrangian bound leaves a box open, ``product_exact_bound`` solves the same
relaxation with gamma integral as well: a two-dimensional knapsack (rows used, pipelines
used) over the minipods. It is slower (a max-plus table of a*PP x b*D' per minipod) but
closes boxes the continuous gamma leaves open by a unit or two, which is where the hard,
fragmented cases sit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: Most array cells the integral bound may sweep for one box (about a third of a second): past
#: it (thousands of pipelines over many minipods) the box is left to SCIP.
INTEGRAL_WORK = 150_000_000

#: Names of the arguments that can rule a spread box out, as reported in ``--json``.
LAGRANGIAN = "product bound (Lagrangian)"
EXACT_PRODUCT = "product bound (integral)"


def product_upper_bound(caps: Sequence[int], rows: int, cols: int, a: int, b: int) -> float:
    """Upper bound on the units that fit with DP spread <= a and PP spread <= b.

    ``caps`` are minipod capacities in units, largest first.
    """
    # numpy costs a tenth of a second to import; most submissions never reach this bound,
    # and every user pays arnold-sbatch's start-up time.
    import numpy as np

    top = np.asarray(list(caps)[: min(len(caps), rows * a, cols * b)], dtype=float)
    budget = rows * a
    rho = np.arange(1, rows + 1, dtype=float)
    best = float("inf")
    for lam in np.linspace(0.0, float(rows), 17):
        # value[p, r-1]: worth of minipod p given r rows touching it
        gamma = np.minimum(cols, top[:, None] / rho[None, :])
        value = np.minimum(top[:, None], rho[None, :] * cols) - lam * gamma
        value = np.where(rho[None, :] > lam, np.maximum(value, 0.0), 0.0)
        dp = np.zeros(budget + 1)
        for p in range(len(top)):
            new = dp.copy()
            for r in range(1, min(rows, budget) + 1):
                candidate = dp[: budget + 1 - r] + value[p, r - 1]
                np.maximum(new[r:], candidate, out=new[r:])
            dp = new
        best = min(best, lam * b * cols + float(dp.max()))
    return best


def integral_work(caps: Sequence[int], rows: int, cols: int, a: int, b: int) -> int:
    """Array cells ``product_exact_bound`` sweeps for this box (for its work limit)."""
    top = list(caps)[: min(len(caps), rows * a, cols * b)]
    per_row = sum(max(1, min(cols, -(-cap // r)).bit_length()) + 3
                  for cap in top for r in range(1, rows + 1))
    return per_row * (rows * a + 1) * (cols * b + 1)


def product_exact_bound(caps: Sequence[int], rows: int, cols: int, a: int, b: int) -> int:
    """Most units that fit with DP spread <= a and PP spread <= b when minipod p, touched by
    rho_p rows and gamma_p pipelines (both integers), holds min(cap_p, rho_p * gamma_p).

    Exact for that relaxation (a 2-D knapsack over the minipods), so never weaker than
    ``product_upper_bound``. ``best[r, g]`` is the most units with exactly r rows and g
    pipelines spent; a minipod given r rows is worth r * g up to its capacity, which it
    reaches at g* = ceil(cap / r) pipelines (more never help). The linear part is a sliding
    window maximum of best[., y] - r * y, taken by doubling, so each (minipod, r) costs
    O(log g*) array operations rather than g*.
    """
    import numpy as np

    top = list(caps)[: min(len(caps), rows * a, cols * b)]
    row_budget, col_budget = rows * a, cols * b
    best = np.full((row_budget + 1, col_budget + 1), -np.inf)
    best[0, 0] = 0.0
    spend = np.arange(col_budget + 1, dtype=float)
    for cap in top:
        new = best.copy()
        for r in range(1, min(rows, row_budget) + 1):
            full = min(-(-cap // r), cols, col_budget)  # g*, or as many as there are
            source = best[: row_budget + 1 - r]
            target = new[r:]
            # g = full: the minipod holds min(cap, r * full).
            np.maximum(target[:, full:], source[:, : col_budget + 1 - full]
                       + min(cap, r * full), out=target[:, full:])
            width = full - 1  # g in 1..full-1 earn r * g
            if width <= 0:
                continue
            h = source - r * spend  # best[., y] - r * y
            window = _window_max(h, width)  # max of h[., y - width + 1 .. y]
            # For column total G: max over g in 1..width of h[., G - g] + r * G.
            shifted = np.full_like(window, -np.inf)
            shifted[:, 1:] = window[:, :-1]
            np.maximum(target, shifted + r * spend, out=target)
        best = new
    return int(best.max())


def _window_max(values: Any, width: int) -> Any:
    """out[., y] = max(values[., max(0, y - width + 1) .. y]) along the last axis."""
    import numpy as np

    span, out = 1, values.copy()
    while span * 2 <= width:
        step = out.copy()
        step[:, span:] = np.maximum(out[:, span:], out[:, :-span])
        out, span = step, span * 2
    if span < width:  # two overlapping windows of length span cover width
        rest = width - span
        final = out.copy()
        final[:, rest:] = np.maximum(out[:, rest:], out[:, :-rest])
        out = final
    return out


def box_costs(minipods: int, alpha: float, below: float) -> list[tuple[float, int, int]]:
    """Every (cost, a, b) with a, b in 1..``minipods`` and cost < ``below``, cheapest first."""
    out = []
    for a in range(1, minipods + 1):
        for b in range(1, minipods + 1):
            cost = round(alpha * a + (1 - alpha) * b, 9)
            if cost < below - 1e-9:
                out.append((cost, a, b))
    out.sort()
    return out


class BoxJudge:
    """Rules spread boxes out on demand, remembering what it proved: a box proven empty
    makes every box inside it (fewer minipods per group is never easier) empty too."""

    def __init__(self, caps: Sequence[int], rows: int, cols: int) -> None:
        self.caps, self.rows, self.cols = list(caps), rows, cols
        self.excluded: list[tuple[int, int, str]] = []

    def ruled_out_by(self, a: int, b: int, *, integral: bool = True) -> str | None:
        """The bound that proves no placement has spreads within (a, b), or ``None``."""
        by = next((why for ea, eb, why in self.excluded if a <= ea and b <= eb), None)
        if by is None:
            need = self.rows * self.cols
            if product_upper_bound(self.caps, self.rows, self.cols, a, b) < need - 1e-6:
                by = LAGRANGIAN
            elif integral and integral_work(self.caps, self.rows, self.cols, a,
                                            b) <= INTEGRAL_WORK and \
                    product_exact_bound(self.caps, self.rows, self.cols, a, b) < need:
                by = EXACT_PRODUCT
            if by is not None:
                self.excluded.append((a, b, by))
        return by
