"""Weights of the placement objective, tier by tier of the tree.

At a tier ``t`` (NVLink domain, leaf, any level between, minipod, core) a job's objective is
``alpha_t x worst DP spread + beta_t x worst PP spread``, spreads counted in that tier's places
(``plan.spreads_per_tier``). The minipod tier's pair is ``--alpha`` and ``1 - alpha``: the MIP
optimises that tier and proves it (two-tier trees keep their meaning). Every other tier
weighs ``w_t`` times as much: ``alpha_t = alpha x w_t``, ``beta_t = (1 - alpha) x w_t``.

``w_t`` defaults from the site's network (``[network]``, the cost model's tiers): a group
spread over several places of tier ``t`` talks over the links just above it (leaving an NVLink
domain: the leaf's; leaving a leaf, or a level below the minipod: the minipod's; leaving a
minipod: the core's), so ``w_t`` is the time per byte of those links (bandwidth divided by
oversubscription) over the time per byte of the core's, which minipod spreads pay. With the
default network (400 Gb/s everywhere, the core 2:1 oversubscribed) every tier below the
minipod weighs 0.5. A site or a user may set any tier but the minipod's (``tier_weights`` in
the site file; ``--tier-weight`` of ``arnold place`` and of ``arnold-sbatch``, which keeps
them in the job's spec so a rebinding weighs alike): ``NAME=W`` scales the tier, ``NAME=A:B``
gives its alpha and beta outright.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from site_config.settings import LinkTier, NetworkTiers
from slurm_arnold.errors import ArnoldError
from slurm_arnold.topology import Topology, spread_tiers, tiers


@dataclass(frozen=True)
class TierWeight:
    """How much a tier's worst DP spread (``alpha``) and worst PP spread (``beta``) count."""

    alpha: float
    beta: float

    def of(self, dp_spread: float, pp_spread: float) -> float:
        """This tier's term of the objective."""
        return round(self.alpha * dp_spread + self.beta * pp_spread, 6)


TierWeights = Mapping[str, TierWeight]


def optimised_tier(topology: Topology) -> str:
    """The tier the MIP optimises (the minipod; the leaf where minipods are leaves)."""
    names = tiers(topology)
    return names[min(topology.minipod_level, len(names) - 1)]


def _seconds_per_byte(link: LinkTier) -> float:
    return link.oversubscription / link.bandwidth_gbps


def _link_above(name: str, position: int, minipod_at: int, network: NetworkTiers) -> LinkTier:
    """The links a group leaving one place of the tier ``name`` (at ``position`` among
    ``blocks.tiers``; the minipod at ``minipod_at``) talks over."""
    if position < 0:  # an NVLink domain that is not the leaf itself: inside the leaf
        return network.leaf
    return network.minipod if position < minipod_at else network.core


def default_weights(topology: Topology, alpha: float,
                    network: NetworkTiers | None = None) -> dict[str, TierWeight]:
    """Every tier's weights from ``network``'s links (module docstring)."""
    network = network or NetworkTiers()
    names = tiers(topology)
    optimised = optimised_tier(topology)
    minipod_at = names.index(optimised)
    reference = _seconds_per_byte(network.core)
    out: dict[str, TierWeight] = {}
    for name in spread_tiers(topology):
        position = names.index(name) if name in names else -1
        w = 1.0 if name == optimised else \
            _seconds_per_byte(_link_above(name, position, minipod_at, network)) / reference
        out[name] = TierWeight(round(alpha * w, 6), round((1 - alpha) * w, 6))
    return out


def _checked(numbers: Sequence[float]) -> bool:
    """One weight, or alpha and beta, each a finite number >= 0."""
    return len(numbers) in (1, 2) and all(0 <= float(v) < float("inf") for v in numbers)


def parse_tier_weight(text: str) -> tuple[str, float | tuple[float, float]]:
    """``NAME=W`` or ``NAME=A:B`` -> (name, W or (A, B)); raises ``ArnoldError``."""
    name, eq, value = text.rpartition("=")
    name = name.strip()
    if not eq or not name:
        raise ArnoldError(f"--tier-weight {text!r}: write TIER=W or TIER=ALPHA:BETA, e.g. "
                          "'leaf=0.5' or 'nvlink domain=0.2:0.8'")
    try:
        parts = [float(v) for v in value.split(":")]
    except ValueError:
        raise ArnoldError(f"--tier-weight {text!r}: {value!r} is not a number (or two "
                          "numbers joined by ':')") from None
    if not _checked(parts):
        raise ArnoldError(f"--tier-weight {text!r}: give one weight or ALPHA:BETA, each a "
                          "finite number >= 0")
    return name, (parts[0] if len(parts) == 1 else (parts[0], parts[1]))


def parse_tier_weights(texts: Iterable[str]) -> dict[str, float | tuple[float, float]]:
    """``--tier-weight`` values (each ``NAME=W`` or ``NAME=A:B``, or several joined by
    commas, as arnold-sbatch takes them in one option) -> ``{name: W or (A, B)}``, the last
    word on a tier winning; raises ``ArnoldError``."""
    return dict(parse_tier_weight(part) for text in texts for part in text.split(",")
                if part.strip())


def resolve(topology: Topology, alpha: float, network: NetworkTiers | None = None, *,
            site: Mapping[str, float | Sequence[float]] | None = None,
            user: Mapping[str, float | Sequence[float]] | None = None) -> dict[str, TierWeight]:
    """The defaults, then the site file's ``tier_weights`` (``site``), then the job's
    ``--tier-weight`` (``user``, parsed), each ``{name: W, [W] or [A, B]}``.

    A site's weights name the tiers of all its partitions, so those of a tier this topology
    lacks (an NVLink domain on a partition without blocks) are skipped; a user's are for this
    job, so such a tier is an error. Raises ``ArnoldError`` for that, for a value that is not
    one or two finite numbers >= 0, and for the tier the MIP optimises (``--alpha`` sets it)."""
    weights = default_weights(topology, alpha, network)
    optimised = optimised_tier(topology)
    for where, layer in (("the site file's [tier_weights]", site or {}),
                         ("--tier-weight", user or {})):
        for name, value in layer.items():
            if name == optimised:
                raise ArnoldError(
                    f"{where}: the {optimised} tier's weights are --alpha and 1 - alpha (the "
                    "tier the MIP optimises); weigh the other tiers")
            if name not in weights:
                if layer is site:
                    continue
                raise ArnoldError(f"{where}: no tier named {name!r} in this topology; its "
                                  f"tiers are {', '.join(repr(n) for n in weights)}")
            numbers = [value] if isinstance(value, (int, float)) else list(value)
            if not _checked(numbers):
                raise ArnoldError(f"{where}: {name} = {value!r}: give one weight or "
                                  "[alpha, beta], each a finite number >= 0")
            if len(numbers) == 1:
                w = float(numbers[0])
                weights[name] = TierWeight(round(alpha * w, 6), round((1 - alpha) * w, 6))
            else:
                weights[name] = TierWeight(float(numbers[0]), float(numbers[1]))
    return weights


def objective_per_tier(per_tier: Sequence[Mapping[str, Any]],
                       weights: TierWeights) -> tuple[list[dict[str, Any]], float]:
    """``plan.spreads_per_tier``'s entries with each tier's ``alpha``, ``beta`` and
    ``weighted_spread``, and the objective summed over the tiers."""
    out = []
    for entry in per_tier:
        w = weights[entry["tier"]]
        out.append(dict(entry) | {"alpha": w.alpha, "beta": w.beta,
                                  "weighted_spread": w.of(entry["max_dp_spread"],
                                                          entry["max_pp_spread"])})
    return out, round(sum(e["weighted_spread"] for e in out), 6)
