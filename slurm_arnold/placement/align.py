"""``--align auto``: alpha (the weight of DP spread) from the job's communication.

The paper characterises how much each kind of traffic suffers when it crosses minipods: up to
17% for collectives (the DP gradient all-reduce / reduce-scatter) and up to 70% for the
point-to-point sends between pipeline stages. It finds PP-aligned placement best for dense
models (+2.3% throughput vs +0% for DP-aligned on 96 GPUs over two minipods), because P2P is
both more sensitive and on the critical path. We weight each group's cross-minipod time by that
sensitivity:

    t_dp = 0.17 * (V_dp / B_x + 2 * (DP - 1) * L_x)          ring all-reduce: 2(DP-1) steps
    t_pp = 0.70 * (V_pp / B_x + M_pp * L_x)                   M_pp messages per iteration
    alpha = t_dp / (t_dp + t_pp),  beta = 1 - alpha

with V the bytes each GPU sends per iteration in its DP group (gradients) and PP group
(activations and their gradients), B_x = core bandwidth / core oversubscription and L_x the
core latency from the site config, and M_pp = 2 x micro-batches (one activation forward, one
gradient backward per micro-batch).

With ``--model M --global-batch B`` instead of the volumes, V_dp and V_pp come from the
planner's cost model (``alpha_from_model``), the same one ``arnold plan`` prices layouts with.
"""

from __future__ import annotations

from site_config import NetworkTiers
from slurm_arnold.errors import InfeasibleError

DP_SENSITIVITY = 0.17
PP_SENSITIVITY = 0.70


def auto_alpha(*, dp_bytes: float, pp_bytes: float, dp: int, microbatches: int,
               network: NetworkTiers) -> float:
    """alpha from per-GPU DP and PP volumes per iteration (see the module docstring)."""
    if dp_bytes < 0 or pp_bytes < 0 or dp_bytes + pp_bytes == 0:
        raise InfeasibleError(
            "--align auto needs --dp-volume and --pp-volume (bytes per GPU per iteration), "
            "at least one of them positive"
        )
    core = network.core
    bytes_per_s = core.bandwidth_gbps * 1e9 / 8 / core.oversubscription
    latency = core.latency_us * 1e-6
    t_dp = DP_SENSITIVITY * (dp_bytes / bytes_per_s + 2 * max(dp - 1, 0) * latency)
    t_pp = PP_SENSITIVITY * (pp_bytes / bytes_per_s + 2 * microbatches * latency)
    if t_dp + t_pp == 0:
        return 0.5
    return round(t_dp / (t_dp + t_pp), 4)


def alpha_from_model(model_name: str, global_batch: int, *, tp: int, pp: int, dp: int,
                     network: NetworkTiers, micro_batch: int = 1, zero: int = 1,
                     recompute: str = "full", interleave: int = 1) -> float:
    """alpha for a job of a catalogue model (or TOML file): its DP and PP volumes from the
    planner's cost model (``plan.cost.communication_volumes``) instead of user-given bytes."""
    from slurm_arnold.plan.catalog import load_model
    from slurm_arnold.plan.cost import Layout, communication_volumes

    model = load_model(model_name)
    layout = Layout(tp, pp, dp, micro_batch=micro_batch, zero=zero, recompute=recompute,
                    interleave=interleave,
                    stages=() if model.layers % pp == 0 else _near_equal(model.layers, pp))
    dp_bytes, pp_bytes, m = communication_volumes(model, layout, global_batch)
    if dp_bytes + pp_bytes == 0:
        return 0.5  # one GPU group each way: nothing to weigh
    return auto_alpha(dp_bytes=dp_bytes, pp_bytes=pp_bytes, dp=dp, microbatches=m,
                      network=network)


def _near_equal(layers: int, pp: int) -> tuple[int, ...]:
    return tuple(layers // pp + (1 if k < layers % pp else 0) for k in range(pp))


def parse_bytes(text: str) -> float:
    """``512M``, ``2G``, ``1.5e9``, ``3GiB`` to bytes."""
    units = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
             "KI": 2**10, "MI": 2**20, "GI": 2**30, "TI": 2**40}
    raw = text.strip().upper().removesuffix("B")
    number = raw.rstrip("KMGTI")
    suffix = raw[len(number):]
    try:
        value = float(number) * units[suffix]
    except (ValueError, KeyError):
        raise InfeasibleError(f"{text!r} is not a byte count; write e.g. 512M or 2G") from None
    return value
