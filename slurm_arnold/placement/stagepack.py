"""Stage packing: whole stages (or groups of stages) packed into the fewest places, tier by
tier, as candidates nowhere worse than every rival.

The MIP keeps each pipeline close (its PP spreads small) and, where racks are scarce, that
can cost a tier below the spines a place or two in DP spread, which the baselines, packing
stage after stage, do not pay. The placement that packs stages as they do *and* keeps the
tiers above within the block rule's is often there: on the 10k-GPU case of `arnold bench
placement --nvl` that the tier model could not decide in 30 s of SCIP, packing two stages
at a time meets every rival's best at every tier.

A packing takes ``group`` stages at a time (``group`` divides the pipeline length), and
places their ``group x columns`` units (TP groups) from the top of the tree down: into the
child place that holds them all and has the least room (``best`` fit) or the most
(``worst`` fit), else into the child with the most room and then the rest the same way,
until NVLink domains are reached. Within a group, the units in tree order go to its first
stage, then to its second, and so on. The counts it gives are the tier model's
(units per stage and domain: ``placement.tiermip.layout_from_tier_counts`` lines the
pipelines up), so every check and repair of the tier model's answers applies to them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Literal

from slurm_arnold.placement.tiermip import TierProblem, layout_from_tier_counts

Fit = Literal["best", "worst"]
#: The fits tried, in order.
FITS: tuple[Fit, ...] = ("best", "worst")

Node = tuple[int, str]  # (tier, place); tier 0 is the NVLink domain


class _Tree:
    """The places of a :class:`TierProblem` as a tree, with the units still free under
    each."""

    def __init__(self, problem: TierProblem, top: int) -> None:
        self.children: dict[Node, list[Node]] = {}
        for d in problem.capacities:
            for t in range(1, top + 1):
                kids = self.children.setdefault((t, problem.places[t][d]), [])
                child = (t - 1, problem.places[t - 1][d])
                if child not in kids:
                    kids.append(child)
        self.roots = list(dict.fromkeys((top, problem.places[top][d])
                                        for d in problem.capacities))
        self.room: dict[Node, int] = {}
        for node in self._post_order():
            self.room[node] = problem.capacities[node[1]] if node[0] == 0 else \
                sum(self.room[c] for c in self.children[node])

    def _post_order(self) -> Iterator[Node]:
        stack: list[tuple[Node, bool]] = [(r, False) for r in reversed(self.roots)]
        while stack:
            node, done = stack.pop()
            if done or node[0] == 0:
                yield node
                continue
            stack.append((node, True))
            stack.extend((c, False) for c in reversed(self.children[node]))

    def place(self, nodes: list[Node], units: int, fit: Fit, out: dict[str, int]) -> None:
        """Take ``units`` from under ``nodes`` (module docstring), adding them to ``out``
        (domain -> units). Ties go to the first place in ``nodes``' order."""
        # Roomiest first, ties in the given order; places taken whole leave from the front,
        # so those holding the rest are always a prefix of what is left.
        ordered = sorted((n for n in nodes if self.room[n] > 0), key=lambda n: -self.room[n])
        first = 0
        while units > 0:
            if first == len(ordered):
                raise ValueError("not enough room")  # the caller checked the total
            if self.room[ordered[first]] >= units:
                pick = first
                if fit == "best":
                    while pick + 1 < len(ordered) and self.room[ordered[pick + 1]] >= units:
                        pick += 1
                    tightest = self.room[ordered[pick]]
                    while pick > first and self.room[ordered[pick - 1]] == tightest:
                        pick -= 1
                self._take(ordered[pick], units, fit, out)
                return
            taken = self.room[ordered[first]]
            self._take(ordered[first], taken, fit, out)
            units -= taken
            first += 1

    def _take(self, node: Node, units: int, fit: Fit, out: dict[str, int]) -> None:
        self.room[node] -= units  # each place below takes its own share in turn
        if node[0] == 0:
            out[node[1]] = out.get(node[1], 0) + units
            return
        self.place(self.children[node], units, fit, out)


def packed_counts(problem: TierProblem, group: int, fit: Fit, top: int | None = None
                  ) -> list[dict[str, int]] | None:
    """Units per (stage, domain) with ``group`` stages packed at a time by ``fit`` (module
    docstring); None when the domains cannot hold the job or ``group`` does not divide the
    stages."""
    if group < 1 or problem.stages % group or \
            sum(problem.capacities.values()) < problem.stages * problem.columns:
        return None
    tree = _Tree(problem, len(problem.places) - 1 if top is None else top)
    order = {d: i for i, d in enumerate(problem.capacities)}
    counts: list[dict[str, int]] = []
    for _ in range(problem.stages // group):
        taken: dict[str, int] = {}
        tree.place(tree.roots, group * problem.columns, fit, taken)
        units = [d for d in sorted(taken, key=order.__getitem__) for _ in range(taken[d])]
        for j in range(group):
            row: dict[str, int] = {}
            for d in units[j * problem.columns:(j + 1) * problem.columns]:
                row[d] = row.get(d, 0) + 1
            counts.append(row)
    return counts


def packings(problem: TierProblem, tier_names: Sequence[str]
             ) -> Iterator[tuple[str, list[dict[str, int]]]]:
    """Every packing tried, named as reported (``stage packing (2 stages at a time, best fit,
    from the leaf switches down)``): groups of 1 stage up to the whole pipeline (divisors of
    the stages), each fit, from every tier down (``tier_names``, nearest first: the tiers
    above the one started from are ignored, so the places there are all open to a group)."""
    for top in reversed(range(len(problem.places))):
        where = "the NVLink domains" if top == 0 else f"the {tier_names[top]} switches"
        for group in range(1, problem.stages + 1):
            for fit in FITS:
                counts = packed_counts(problem, group, fit, top)
                if counts is not None:
                    noun = "stage" if group == 1 else "stages"
                    yield (f"stage packing ({group} {noun} at a time, {fit} fit, "
                           f"from {where} down)"), counts


def weighted_tiers(problem: TierProblem, counts: Sequence[dict[str, int]]) -> list[float]:
    """Each tier's weighted worst spread (alpha x DP + beta x PP, ``problem.weights``) once
    ``counts`` are lined up by ``layout_from_tier_counts`` in the domains' order: what
    ``placement.dominate.tier_vector`` would measure on the cells, computed on domains."""
    layout = layout_from_tier_counts(counts, list(problem.capacities))
    out = []
    for where, (alpha, beta) in zip(problem.places, problem.weights, strict=True):
        dp = max(len({where[d] for d in row}) for row in layout)
        pp = max(len({where[row[k]] for row in layout}) for k in range(problem.columns))
        out.append(alpha * dp + beta * pp)
    return out
