"""Move single TP groups until every tier is within its bar: the tier model's last step.

``placement.tiermip`` decides how many units (TP groups) of each stage go to each NVLink
domain, so its DP spreads are exact; its pipelines are lined up in tree order, and a
pipeline can still touch one place too many at some tier. ``repair`` moves single units (a
TP group's nodes, which stay in one domain) into free room of another domain, or swaps two
units, until every tier's weighted worst spread is within its bar (the rivals' best there).
The cost of a state is (the tiers' excess over their bars, the groups at the worst spread
of a tier past its bar): a move takes a unit of such a group from the place where the group
has the fewest units to another of its places, and is kept when the cost does not rise (or,
rarely, by chance, to leave a state no single move improves), so the crowd at the worst
spread thins until the worst spread itself falls. The search stops at zero excess, which it
returns, or at its move budget, a stall or the placement's deadline, where it returns
nothing.

Each move costs a few dictionary updates per tier (units of each group per place), and a
fixed seed makes the search repeatable.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

from slurm_arnold.placement.plan import Cell
from slurm_arnold.placement.tiermip import nodes_by_domain

#: Moves tried at most (each one unit relocated or two swapped).
MAX_MOVES = 10_000
#: Moves in a row that did not lower the cost after which the search gives up.
STALL_MOVES = 2_000
#: Chance that a move raising the cost is kept all the same.
UPHILL = 0.05
#: How often (in moves) the deadline is looked at.
CLOCK_EVERY = 256


class _Search:
    """Units in domains, with each group's places per tier counted as they move."""

    def __init__(self, cells: Mapping[Cell, Sequence[str]], nodes_of: dict[str, list[str]],
                 places: Sequence[Callable[[str], str]], bars: Sequence[float],
                 weights: Sequence[tuple[float, float]], nodes_per_unit: int) -> None:
        self.cells = list(cells)
        self.nodes_of = nodes_of
        domain_of = {n: d for d, ns in nodes_of.items() for n in ns}
        self.room = {d: len(ns) // nodes_per_unit for d, ns in self.nodes_of.items()}
        self.key = [{d: where(ns[0]) for d, ns in self.nodes_of.items()} for where in places]
        self.domains_at: list[dict[str, list[str]]] = [defaultdict(list) for _ in places]
        for t, keys in enumerate(self.key):
            for d, p in keys.items():
                self.domains_at[t][p].append(d)
        self.bars = list(bars)
        self.weights = list(weights)
        self.loc = [domain_of[cells[c][0]] for c in self.cells]
        self.home = list(self.loc)
        self.units_in: dict[str, set[int]] = defaultdict(set)
        for u, d in enumerate(self.loc):
            self.units_in[d].add(u)
            self.room[d] -= 1
        # Group g of kind 0 (a DP group: the stage) or 1 (a pipeline: the column).
        self.group = [(c[0], c[1]) for c in self.cells]
        self.members: list[dict[int, list[int]]] = [defaultdict(list), defaultdict(list)]
        for u, (j, k) in enumerate(self.group):
            self.members[0][j].append(u)
            self.members[1][k].append(u)
        # Per tier and kind: units per (group, place), places per group, groups per spread.
        self.count: list[list[dict[tuple[int, str], int]]] = []
        self.spread: list[list[dict[int, int]]] = []
        self.hist: list[list[dict[int, int]]] = []
        for t in range(len(places)):
            counts: list[dict[tuple[int, str], int]] = [defaultdict(int), defaultdict(int)]
            for u, d in enumerate(self.loc):
                for kind in (0, 1):
                    counts[kind][self.group[u][kind], self.key[t][d]] += 1
            spread: list[dict[int, int]] = [defaultdict(int), defaultdict(int)]
            hist: list[dict[int, int]] = [defaultdict(int), defaultdict(int)]
            for kind in (0, 1):
                for g, _ in counts[kind]:
                    spread[kind][g] += 1
                for s in spread[kind].values():
                    hist[kind][s] += 1
            self.count.append(counts)
            self.spread.append(spread)
            self.hist.append(hist)
        self.cost = self._cost()

    def _worst(self, t: int, kind: int) -> int:
        return max(s for s, n in self.hist[t][kind].items() if n)

    def over(self, t: int) -> float:
        """How far tier t's weighted spread is above its bar (0 when within)."""
        a, b = self.weights[t]
        above = a * self._worst(t, 0) + b * self._worst(t, 1) - self.bars[t]
        return above if above > 1e-9 else 0.0

    def _cost(self) -> tuple[float, int]:
        """(The tiers' excess over their bars, the groups at the worst spread of a tier
        past its bar): the second falls first, and the first then follows."""
        excess, crowd = 0.0, 0
        for t in range(len(self.bars)):
            if (above := self.over(t)) > 0:
                excess += above
                for kind in (0, 1):
                    if self.weights[t][kind] > 0:
                        crowd += self.hist[t][kind][self._worst(t, kind)]
        return round(excess, 9), crowd

    def violators(self) -> list[tuple[int, int, int]]:
        """(tier, kind, group) of every group at the worst spread of a tier past its bar."""
        out = []
        for t in range(len(self.bars)):
            if self.over(t) > 0:
                for kind in (0, 1):
                    if self.weights[t][kind] > 0:
                        worst = self._worst(t, kind)
                        out += [(t, kind, g) for g, s in self.spread[t][kind].items()
                                if s == worst]
        return out

    def move(self, u: int, to: str) -> None:
        """Put unit ``u`` in domain ``to``."""
        was = self.loc[u]
        for t, keys in enumerate(self.key):
            p, q = keys[was], keys[to]
            if p == q:
                continue
            for kind in (0, 1):
                g = self.group[u][kind]
                counts, spread, hist = self.count[t][kind], self.spread[t][kind], self.hist[t][kind]
                before = spread[g]
                counts[g, p] -= 1
                if counts[g, p] == 0:
                    del counts[g, p]
                    spread[g] -= 1
                counts[g, q] = counts.get((g, q), 0) + 1
                if counts[g, q] == 1:
                    spread[g] += 1
                if spread[g] != before:
                    hist[before] -= 1
                    hist[spread[g]] += 1
        self.loc[u] = to
        self.units_in[was].discard(u)
        self.units_in[to].add(u)
        self.room[was] += 1
        self.room[to] -= 1

    def step(self, rng: random.Random) -> None:
        """One move aimed at a group past its spread: a unit from the place where the group
        has the fewest units goes to a domain in another of its places (into free room, or
        swapped with a unit there); undone if the cost rose."""
        t, kind, g = rng.choice(self.violators())
        keys = self.key[t]
        by_place: dict[str, list[int]] = defaultdict(list)
        for u in self.members[kind][g]:
            by_place[keys[self.loc[u]]].append(u)
        if len(by_place) < 2:
            return
        fewest = min(len(us) for us in by_place.values())
        source = rng.choice([p for p, us in by_place.items() if len(us) == fewest])
        u = rng.choice(by_place[source])
        target = rng.choice([p for p in by_place if p != source])
        d = rng.choice(self.domains_at[t][target])
        home = self.loc[u]
        if self.room[d] > 0:
            self.move(u, d)
            if not self._keep(rng):
                self.move(u, home)
            return
        others = [v for v in self.units_in[d] if self.group[v][kind] != g]
        if not others:
            return
        v = rng.choice(others)
        # Room goes below zero in d between the two moves and is whole again after them.
        self.move(u, d)
        self.move(v, home)
        if not self._keep(rng):
            self.move(v, d)
            self.move(u, home)

    def _keep(self, rng: random.Random) -> bool:
        """Whether the moves just made are kept: the cost did not rise, or (``UPHILL``) by
        chance, so that the search leaves a state no single move improves."""
        cost = self._cost()
        if cost <= self.cost or rng.random() < UPHILL:
            self.cost = cost
            return True
        return False

    def result(self, cells: Mapping[Cell, Sequence[str]],
               nodes_per_unit: int) -> dict[Cell, list[str]]:
        """The cells, each unit on nodes of its domain: those it had where it stayed, free
        ones (in tree order) where it moved."""
        out: dict[Cell, list[str]] = {}
        held: dict[str, set[str]] = defaultdict(set)
        moved: dict[str, list[int]] = defaultdict(list)
        for u, cell in enumerate(self.cells):
            if self.loc[u] == self.home[u]:
                out[cell] = list(cells[cell])
                held[self.loc[u]].update(cells[cell])
            else:
                moved[self.loc[u]].append(u)
        for d, units in moved.items():
            spare = iter([n for n in self.nodes_of[d] if n not in held[d]])
            for u in units:
                out[self.cells[u]] = [next(spare) for _ in range(nodes_per_unit)]
        return {cell: out[cell] for cell in self.cells}


def repair(cells: Mapping[Cell, Sequence[str]], free: Sequence[str],
           domain_of: Callable[[str], str], places: Sequence[Callable[[str], str]],
           bars: Sequence[float], weights: Sequence[tuple[float, float]],
           nodes_per_unit: int, *, deadline: float | None = None, seed: int = 0,
           max_moves: int = MAX_MOVES) -> dict[Cell, list[str]] | None:
    """``cells`` (each unit's nodes in one domain of ``domain_of``) with units moved between
    the domains of the ``free`` nodes until, at every tier t (``places[t]``: node -> place),
    ``weights[t]`` = (alpha, beta) times the worst DP and PP spreads is at most ``bars[t]``
    (module docstring). None when the move budget, ``STALL_MOVES`` moves without progress
    or ``deadline`` (``time.monotonic()``) come first, or when some domain's nodes are not
    all in one place of a tier (moves could not be counted by domain)."""
    nodes_of = nodes_by_domain(free, domain_of, places)
    if nodes_of is None:
        return None
    search = _Search(cells, nodes_of, places, bars, weights, nodes_per_unit)
    rng = random.Random(seed)
    best, since = search.cost, 0
    for moves in range(max_moves):
        if search.cost[0] == 0:
            return search.result(cells, nodes_per_unit)
        if since > STALL_MOVES or (moves % CLOCK_EVERY == 0 and deadline is not None
                                   and time.monotonic() > deadline):
            return None
        search.step(rng)
        best, since = (search.cost, 0) if search.cost < best else (best, since + 1)
    return search.result(cells, nodes_per_unit) if search.cost[0] == 0 else None
