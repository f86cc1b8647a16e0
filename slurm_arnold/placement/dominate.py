"""Never worse than Slurm's own answer at any tier, where a placement tried is not.

The MIP minimises the weighted spread at the minipod tier; ``placement.regroup`` and
``placement.arrange`` then tighten the tiers above and below it without touching that
optimum. On a tree with NVLink domains a tier can still end up worse than a rival's there
(Slurm's block rule, or a baseline that keeps TP groups whole): the minipods the MIP chose
hold fragmented racks, while the rival, spread over more minipods, took fuller ones. The two
placements are then incomparable, each better at some tier.

``dominant`` settles that as an admin comparing against slurmctld would ask: if ours is worse
than some rival at some tier, it lays each rival's nodes, those of the MIP's own warm starts
aligned along DP or PP (no rival, but they fill whole racks stage by stage) and band layouts
in a few spread boxes looser than the MIP's (more minipods to take fuller racks from; the
engine's ``LOOSER_BOXES``), out by our own steps (regrouped and arranged) and keeps the
candidate worse than the fewest (rival, tier) pairs, then the lowest
objective summed over the tiers (``placement.weights``), but never one that is still worse
somewhere *and* higher in that sum than ours: a candidate that only loses fewer tiers may be
far worse at the minipod tier (in development on the NVL bench, one had a 70% larger spine
spread to win a rack and a leaf back). A trade costs the minipod objective, and the
placement's gap shows it. On `arnold bench placement --nvl` this lowered both the cases
lost to a rival at some tier and the summed objective's mean ratio to the block rule
(docs/placement.md).

When no candidate is nowhere worse, the engine makes the MIP again inside the smallest
region where a rival beat it (``rival_regions``, a ``costly`` candidate here) and then
builds the tier model (``placement.tiermip``), which finds a placement nowhere worse than
every rival or proves that none exists.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from slurm_arnold.placement.plan import Cell, spreads_per_tier, tier_places
from slurm_arnold.placement.weights import TierWeights
from slurm_arnold.topology import DOMAIN, Topology

Cells = Mapping[Cell, Sequence[str]]


@dataclass(frozen=True)
class Choice:
    """The placement kept: ``"ours"`` or ``"<rival>'s nodes"``, its cells, and how many
    (rival, tier) pairs ours and it are worse at than the rival."""

    source: str
    cells: dict[Cell, list[str]]
    regret_before: int
    regret_after: int

    def as_json(self) -> dict[str, object]:
        """What ``arnold place --json`` reports under ``info.dominance``."""
        return {"source": self.source, "rival_tiers_worse_before": self.regret_before,
                "rival_tiers_worse_after": self.regret_after}


def tier_vector(cells: Cells, topology: Topology,
                weights: TierWeights) -> tuple[float, ...]:
    """The weighted spread at every tier, nearest first (``plan.spreads_per_tier``)."""
    return tuple(weights[e["tier"]].of(e["max_dp_spread"], e["max_pp_spread"])
                 for e in spreads_per_tier(cells, topology))


def regret(vector: Sequence[float], bars: Sequence[Sequence[float]]) -> int:
    """How many (rival, tier) pairs ``vector`` is worse at than the rivals' ``bars``."""
    return sum(1 for bar in bars for ours, theirs in zip(vector, bar, strict=True)
               if ours > theirs + 1e-9)


def rival_vectors(rivals: Mapping[str, Cells], topology: Topology,
                  weights: TierWeights) -> dict[str, tuple[float, ...]]:
    """Each rival's ``tier_vector``: measured once and handed to the steps that compare with
    them (at 100k GPUs a vector takes about a tenth of a second)."""
    return {name: tier_vector(cells, topology, weights) for name, cells in rivals.items()}


def rival_regions(ours: Cells, rivals: Mapping[str, Cells], free: Sequence[str],
                  topology: Topology, weights: TierWeights, most: int,
                  vectors: Mapping[str, Sequence[float]] | None = None
                  ) -> dict[str, list[str]]:
    """For each (rival, tier) where ``ours`` is worse than the rival: the ``free`` nodes under
    the places (NVLink domains or switches) the rival's nodes occupy at that tier, named
    ``the MIP within <rival>'s <places>``, smallest first; a region of more than ``most``
    nodes, or one met before, is left out (``vectors``: ``rival_vectors``, when measured)."""
    vectors = rival_vectors(rivals, topology, weights) if vectors is None else vectors
    mine = tier_vector(ours, topology, weights)
    places = tier_places(topology)
    regions: dict[str, list[str]] = {}
    seen: set[frozenset[str]] = set()
    for rival, cells in rivals.items():
        for (tier, where), a, b in zip(places, mine, vectors[rival], strict=True):
            if a <= b + 1e-9:
                continue
            used = {where(n) for ns in cells.values() for n in ns}
            region = [n for n in free if where(n) in used]
            key = frozenset(region)
            if len(region) > most or key in seen:
                continue
            seen.add(key)
            kind = "NVLink domains" if tier == DOMAIN else f"{tier} switches"
            regions[f"the MIP within {rival}'s {kind}"] = region
    return dict(sorted(regions.items(), key=lambda item: len(item[1])))


def dominant(ours: dict[Cell, list[str]], rivals: Mapping[str, Cells],
             relayout: Callable[[Cells], dict[Cell, list[str]]], topology: Topology,
             weights: TierWeights, sources: Mapping[str, Cells] | None = None,
             deadline: float | None = None,
             costly: Mapping[str, Callable[[], Cells | None]] | None = None,
             vectors: Mapping[str, Sequence[float]] | None = None) -> Choice:
    """``ours`` unless it is worse than a rival at some tier and the node set of one of the
    ``sources`` (default: the rivals), passed through ``relayout`` (regroup and arrange), is
    nowhere worse than any rival, or worse at fewer (rival, tier) pairs with a summed
    objective no higher than ours (module docstring); the fewest such pairs, then the lowest
    summed objective, then the first source. ``costly`` candidates (named as they will be
    reported; None: nothing found) are made only after every source, and only while no
    candidate so far is nowhere worse. Past ``deadline`` (``time.monotonic()``) no further
    candidate is made or laid out: the placement's time limit is a safety net for the whole.
    ``vectors``: ``rival_vectors``, when measured."""
    vectors = rival_vectors(rivals, topology, weights) if vectors is None else vectors
    bars = [vectors[name] for name in rivals]
    sources = rivals if sources is None else sources
    mine = tier_vector(ours, topology, weights)
    before = regret(mine, bars)
    best = Choice("ours", ours, before, before)
    if before == 0:
        return best
    best_key = (before, sum(mine))
    seen: set[frozenset[str]] = set()
    named: list[tuple[str, Cells | Callable[[], Cells | None]]] = [
        (f"{name}'s nodes", cells) for name, cells in sources.items()]
    named += list((costly or {}).items())
    for name, made in named:
        if deadline is not None and time.monotonic() > deadline:
            break
        if callable(made):
            if best_key[0] == 0:
                break
            found = made()
            if found is None:
                continue
            cells = found
        else:
            cells = made
        nodes = frozenset(n for ns in cells.values() for n in ns)
        if nodes in seen:  # the same nodes laid out again give the same answer
            continue
        seen.add(nodes)
        candidate = relayout(cells)
        vector = tier_vector(candidate, topology, weights)
        key = (regret(vector, bars), sum(vector))
        if key[0] > 0 and key[1] > sum(mine) + 1e-9:
            continue  # worse somewhere and worse in sum: no trade
        if key < best_key and (key[0] < best_key[0] or key[1] < best_key[1] - 1e-9):
            best_key = key
            best = Choice(name, candidate, before, key[0])
    return best


def explain(dominance: Mapping[str, object] | None) -> str | None:
    """One line for ``arnold place``'s table when ``info["dominance"]`` (``Choice.as_json``,
    with the tier model's record under ``tier_model``) says the MIP's own answer was traded,
    or that no placement could be nowhere worse than the rivals; None otherwise."""
    if not dominance:
        return None
    before, after = dominance["rival_tiers_worse_before"], dominance["rival_tiers_worse_after"]
    model = dominance.get("tier_model")
    proven = isinstance(model, Mapping) and model.get("proven_impossible")
    if dominance.get("source") == "ours":
        if not proven:
            return None
        return (f"the MIP's answer is worse than Slurm's block rule or a baseline at {before} "
                "(rival, tier) pairs, and the tier model proved that no placement is as good "
                "as the best of them at every tier")
    where = "nowhere worse than them" if after == 0 else f"worse at {after}"
    proof = ("; the tier model proved that no placement is nowhere worse than them"
             if proven else "")
    source = str(dominance["source"])
    # Candidates' nodes are laid out by regroup and arrange; the later steps (engine's
    # _win_back) make their own layout.
    made = source.startswith(("stage packing", "the tier model"))
    kept = source if made else f"{source} laid out by arnold"
    return (f"kept {kept}: the MIP's own answer was worse "
            f"than Slurm's block rule or a baseline at {before} (rival, tier) pairs, this one "
            f"is {where}; the gap is what that cost at the minipod tier{proof}")
