"""The simulator's settings (``arnold sim --set KEY=VALUE``): one dataclass with every
default, the text settings' choices, and how a ``--set`` value is read."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

#: The simulator's placement safety net (s), so that a replay's placements do not depend on
#: the machine's load. The engine's work limits decide: Curie's slowest solve took 10 s
#: (``placement_slowest_s``, docs/sim.md; 275 s before the pipeline-type model replaced most
#: of the cell model's work); ``placements_time_limited`` says whether a replay reached it.
SIM_PLACEMENT_SAFETY_S = 600.0


#: How ``SimSettings.lpj_jumps_pay`` counts a jump's delay to a blocked LPJ (off: no rule).
LPJ_JUMP_COSTS = ("off", "limits", "predictions", "expected")
#: How ``SimSettings.lpj_head_shadow`` judges whether an LPJ behind the head runs past its
#: shadow (off: no rule).
LPJ_HEAD_SHADOWS = ("off", "limits", "predictions")
#: Which n nodes the LPJs' head keeps in its shadow (``SimSettings.lpj_head_shadow_nodes``).
LPJ_SHADOW_NODES = ("busy-first", "tree-fit")


@dataclass
class SimSettings:
    """Everything that shapes one simulation run."""

    policy: str = "slurm"
    predictor: str = "requested"
    mode: str = "share"
    placement: str = "mip"
    alpha: float = 0.5
    depth: int = 100
    plan_ahead: int = 8
    max_reservations: int = 4
    #: The placement engine's wall-clock safety net (s). Node limits decide when the MIP
    #: stops; a net a loaded machine can reach makes a replay's placements, then its schedule,
    #: depend on the load (it was 1 s, which Curie's 5,120-node tree reached under load:
    #: docs/sim.md). ``placements_time_limited`` in the results counts the solves it stopped.
    placement_time_limit: float = SIM_PLACEMENT_SAFETY_S
    spread_weight_h: float = 1.0
    reserve_horizon_h: float = 2.0
    #: Reserve only where the LPJ's saving outweighs ``idle_share`` of the idle node-hours
    #: (reservations.policy) and, with ``lpj_keeps_place``, never on nodes backfill planned for
    #: the jobs ahead of it. `arnold bench sim --variants` measures each on every log
    #: (docs/sim.md): paying for itself with an idle share of 0.25 had the better worst case
    #: of the shares tried, so it is on; keeping the place was worse everywhere, so it is off.
    pay_for_itself: bool = True
    #: The share of a reservation's idle node-hours counted as its cost (a setting, chosen by
    #: the variants bench; not a measured fill by admitted jobs).
    idle_share: float = 0.25
    lpj_keeps_place: bool = False
    #: Backfill plans count a reservation's nodes as free once its LPJ, started when they
    #: drain by their limits, has run to its own limit; off, they are never free while
    #: reserved, so a job needing more nodes than the reservations leave has no plan at all
    #: (nothing protects it) until they start. Off by default: alone it makes small jobs
    #: respect a very large job's plan that LPJs still pass, which costs everyone's wait.
    plans_past_reservations: bool = False
    #: An LPJ may not take, to start now or to reserve, the nodes backfill planned for a
    #: blocked LPJ ahead of it (small jobs' plans do not bind it, unlike ``lpj_keeps_place``).
    #: Off: on Curie's held-out jobs it ends the 4,500-node job's starvation but both waits
    #: then miss by far (`arnold bench sim --held-out --variants`; docs/sim.md).
    lpjs_respect_lpj_plans: bool = False
    #: An LPJ that has waited this long without a reservation keeps its place against the
    #: LPJs behind it (they may not take the nodes planned for it). Off: on Curie's held-out
    #: jobs 10,000-20,000, where a 4,500-node job starves for days without it, a day's bound
    #: made both waits far worse (`arnold bench sim --held-out --variants`; docs/sim.md).
    lpj_starved_h: float = math.inf
    #: An LPJ still waiting past the start of the first backfill plan made for it (by time
    #: limits, as Slurm's backfill plans) keeps its place against the LPJs behind it, as
    #: with ``lpj_starved_h``: LPJs pass a blocked LPJ freely only until it has waited as
    #: long as that plan said. On: the only rule tried that meets every rule on all six
    #: slices, Curie's held-out jobs included, where without it a 4,500-node job starved for
    #: 90 h and its drain at the end cost utilisation 3 points (docs/sim.md, session 37).
    lpj_starved_past_plan: bool = True
    #: An LPJ may take the nodes planned for a blocked LPJ ahead only when the node-hours it
    #: saves itself (its nodes x its wait if it kept its turn) are at least the node-hours it
    #: may delay the other (that LPJ's nodes x how far past that plan's start it runs, by its
    #: time limit with "limits", by its upper prediction with "predictions", and with
    #: "expected" by both weighed by the upper prediction's odds: the prediction with
    #: ``quantile``, the limit with the rest). "off": LPJs pass blocked LPJs freely. Off: on
    #: Curie's held-out jobs, by limits it ends the starving of the 4,096- and 4,500-node
    #: jobs but misses both waits, by predictions it meets the waits and misses utilisation,
    #: expected as by limits (`arnold bench sim --held-out --variants`; docs/sim.md).
    lpj_jumps_pay: str = "off"
    #: The first blocked LPJ in the queue (the head, for LPJs) keeps its place against the
    #: LPJs behind it, as Slurm's backfill keeps the queue's head: they may not take the
    #: nodes planned for it unless they end, by their limit, before its planned start.
    #: Off: alone it made both waits far worse on Curie's held-out jobs (docs/sim.md).
    lpj_head_binds: bool = False
    #: The LPJs' head (as ``lpj_head_binds``) is protected as EASY backfill protects the
    #: queue's head, by the predictions: its shadow is when enough nodes drain by them
    #: (reserved ones once their LPJ has run its predicted time). An LPJ behind it that would
    #: run past the shadow, by its time limit with "limits", by its upper prediction with
    #: "predictions", may use only the nodes the head will not need then, now or by a
    #: reservation. "off": no such rule. Off: "limits" is the first setting to meet every rule
    #: on both held-out slices, but misses utilisation on Curie's first 10,000 jobs (-0.012);
    #: "predictions" misses on Curie's held-out and first jobs (`arnold bench sim
    #: --variants`, with and without ``--held-out``; docs/sim.md). Since ``model_q`` predicts
    #: the limit before its first fit, "limits" meets every rule on Curie's first jobs but
    #: misses both waits by far on its held-out jobs (docs/sim.md, session 36).
    lpj_head_shadow: str = "off"
    #: Which of the nodes that drain by the head's shadow it keeps, where more than it needs
    #: drain by then (ties: a job's or a reservation's nodes all drain at once):
    #: "busy-first" keeps busy ones and leaves idle ones open to the LPJs behind;
    #: "tree-fit" keeps the ones Slurm's tree fit would choose, as the head's backfill plan
    #: does. With ``lpj_head_shadow=limits``, busy-first meets every rule on both held-out
    #: slices and misses utilisation on Curie's first 10,000 jobs; tree-fit mends that slice
    #: but misses LPJ wait on Curie's held-out jobs and waits on SDSC-SP2 and KTH
    #: (`arnold bench sim --variants`, with and without ``--held-out``; docs/sim.md).
    lpj_head_shadow_nodes: str = "busy-first"
    replan_gain_s: float = 600.0
    #: Also replan a reservation whose own expected start slipped (``_replan_reservations``).
    replan_on_slip: bool = True
    quantile: float = 0.9
    #: Where the topology has NVLink domains: arnold chooses nodes in partly used domains before
    #: whole ones (SimCluster), slurm's tree-fit does not. Off, arnold chooses as slurm does.
    keep_domains_whole: bool = True


#: SimSettings fields `arnold sim` sets with options of their own, not with ``--set``.
OWN_OPTIONS = {"policy": "--policy", "predictor": "--predictor", "mode": "--mode",
               "placement": "--placement", "depth": "--depth",
               "max_reservations": "--max-reservations", "spread_weight_h": "--spread-weight-h",
               "reserve_horizon_h": "--horizon-h", "keep_domains_whole": "--keep-domains-whole"}
#: The text settings' choices: `arnold sim --set` and Simulation refuse others.
CHOICES = {"lpj_jumps_pay": LPJ_JUMP_COSTS, "lpj_head_shadow": LPJ_HEAD_SHADOWS,
           "lpj_head_shadow_nodes": LPJ_SHADOW_NODES}
#: Settings that are a share, and whether 0 and 1 themselves are allowed (alpha: the DP
#: spread's weight, beta = 1 - alpha; quantile: a probability strictly inside).
FRACTIONS = {"alpha": True, "quantile": False}
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def parse_setting(key: str, text: str) -> tuple[str, Any]:
    """One ``KEY=VALUE`` of ``arnold sim --set``: the field and its value, read as the type
    of the field's default. ValueError, with the fix, for an unknown field, a field with an
    option of its own, or a value that is not of the field's type (numbers: 0 or more, inf
    allowed where the default is a float, e.g. ``lpj_starved_h``)."""
    defaults = SimSettings()
    names = sorted(f.name for f in fields(SimSettings) if f.name not in OWN_OPTIONS)
    if key in OWN_OPTIONS:
        raise ValueError(f"{key} has an option of its own: use {OWN_OPTIONS[key]}")
    if key not in names:
        raise ValueError(f"unknown setting {key!r}; use one of " + ", ".join(names))
    kind = type(getattr(defaults, key))
    value: Any
    if kind is bool:
        if text.lower() not in _TRUE + _FALSE:
            raise ValueError(f"{key} takes true or false, not {text!r}")
        value = text.lower() in _TRUE
    elif kind in (int, float):
        try:
            value = kind(text)
        except ValueError:
            raise ValueError(f"{key} takes a{'n integer' if kind is int else ' number'}, "
                             f"not {text!r}") from None
        if math.isnan(value) or value < 0:
            raise ValueError(f"{key} takes a number of 0 or more, not {text!r}")
        closed = FRACTIONS.get(key)
        if closed is not None and not (0 <= value <= 1 if closed else 0 < value < 1):
            raise ValueError(f"{key} takes a number {'in [0, 1]' if closed else 'between 0 and 1'}"
                             f", not {text!r}")
    elif key in CHOICES and text not in CHOICES[key]:
        raise ValueError(f"unknown {key} {text!r}; use " + ", ".join(CHOICES[key]))
    else:
        value = text
    return key, value
