"""``arnold place``: where a TP x PP x DP job would go on the fat tree, and its spreads."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click
import hostlist
from rich.console import Console
from rich.table import Table

from site_config import load_config
from slurm_arnold.cli.options import (
    Finite,
    json_option,
    parallelism_options,
    topology_option,
)
from slurm_arnold.errors import ArnoldError
from slurm_arnold.placement import Parallelism, Placement, place
from slurm_arnold.placement.align import alpha_from_model, auto_alpha, parse_bytes
from slurm_arnold.placement.dominate import explain
from slurm_arnold.placement.engine import (
    ALGOS,
    DEFAULT_TIME_LIMIT,
    check_alpha,
    place_from_node_list,
)
from slurm_arnold.placement.plan import spreads_per_tier
from slurm_arnold.placement.weights import objective_per_tier, parse_tier_weights
from slurm_arnold.placement.weights import resolve as resolve_weights
from slurm_arnold.slurm import Slurm
from slurm_arnold.snapshot.live import live_cluster, slurm_choice
from slurm_arnold.snapshot.view import offline_cluster, read_free_file
from slurm_arnold.topology import Topology, read_topology_file


@click.command("place")
@topology_option("Place on this topology.conf (offline) instead of the live cluster.")
@click.option("--free", "free_file", type=click.Path(dir_okay=False),
              help="Free nodes, one name or hostlist per line (default: every node).")
@click.option("--gpus-per-node", type=click.IntRange(min=1),
              help="GPUs per node (default: 8 offline, the nodes' GRES live).")
@click.option("--tp", type=click.IntRange(min=1), required=True, help="Tensor-parallel size.")
@click.option("--pp", type=click.IntRange(min=1), required=True, help="Pipeline stages.")
@click.option("--dp", type=click.IntRange(min=1), help="Data-parallel replicas.")
@click.option("--nodes", type=click.IntRange(min=1),
              help="Nodes; gives DP = N*g/(TP*CP*PP).")
@parallelism_options
@click.option("--alpha", type=Finite(),
              help="Weight of DP spread in [0, 1] (beta = 1 - alpha).")
@click.option("--align", type=click.Choice(["auto"]),
              help="Derive alpha from the job's communication and the site's network: the "
                   "volumes given (--dp-volume/--pp-volume) or the planner's cost model "
                   "(--model with --global-batch).")
@click.option("--dp-volume", help="Bytes each GPU sends per iteration in its DP group.")
@click.option("--pp-volume", help="Bytes each GPU sends per iteration in its PP group.")
@click.option("--microbatches", type=click.IntRange(min=1), default=8, show_default=True,
              help="Micro-batches per iteration (PP messages for --align auto).")
@click.option("--model", "model_name",
              help="Catalogue model or TOML file whose traffic --align auto weighs.")
@click.option("--global-batch", type=click.IntRange(min=1),
              help="Sequences per iteration (with --model for --align auto).")
@click.option("--micro-batch", type=click.IntRange(min=1), default=1, show_default=True,
              help="Sequences per micro-batch (with --model for --align auto).")
@click.option("--algo", type=click.Choice(ALGOS), default="mip", show_default=True,
              help="Placement algorithm; `slurm` asks the live slurmctld (sbatch --test-only).")
@click.option("--tier-weight", "tier_weights", multiple=True, metavar="TIER=W|TIER=A:B",
              callback=lambda _ctx, _param, values: _tier_weights(values),
              help="Weight of a tier other than the minipod (repeatable): W scales alpha and "
                   "beta there, A:B sets them; tiers as `--json`'s per_tier names them "
                   "(default: the site's tier_weights, else from its network's links).")
@click.option("--time-limit", type=Finite(min=0.1), default=DEFAULT_TIME_LIMIT,
              show_default=True,
              help="Wall-clock safety net in seconds, counted from the command's start (node "
                   "limits decide when the MIP stops, so the answer does not depend on the "
                   "machine's load unless this binds).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed (random-fit).")
@click.option("--partition", help="Partition whose nodes are free (live; default: Slurm's).")
@click.option("--explain", "explain_to", is_flag=False, flag_value="", default=None,
              metavar="[=PATH]",
              help="Also show Slurm's own choice beside ours: a table and a picture, drawn to "
                   "PATH as with arnold-sbatch --explain=PATH (default: --picture's).")
@click.option("--picture", "picture_path", type=click.Path(dir_okay=False),
              default="arnold-explain.svg", show_default=True,
              help="Where --explain draws (SVG; a .png name gives PNG).")
@json_option()
def place_cmd(topology_file: str | None, free_file: str | None, gpus_per_node: int | None,
              tp: int, pp: int, dp: int | None, nodes: int | None, cp: int, ep: int,
              nvlink_group: str, alpha: float | None,
              align: str | None, dp_volume: str | None, pp_volume: str | None,
              microbatches: int, model_name: str | None, global_batch: int | None,
              micro_batch: int, algo: str, tier_weights: dict[str, Any], time_limit: float,
              seed: int, partition: str | None, explain_to: str | None, picture_path: str,
              as_json: bool) -> None:
    """Place a TP x PP x DP job on the fat tree and print its layout and spreads."""
    # --time-limit counts from here: what the user waits for includes reading the topology and
    # the free nodes. (Not from import: in one process the command may run many times.)
    started = time.monotonic()
    # What can be checked without the cluster is checked before asking it.
    if dp is None and nodes is None:
        raise click.UsageError("give --dp or --nodes")
    if alpha is not None:
        check_alpha(alpha)
    if align == "auto" and alpha is not None:
        raise click.UsageError("give --alpha or --align auto, not both")
    config = load_config({"partition": partition})
    if topology_file:
        if algo == "slurm":
            raise click.UsageError("--algo slurm asks the live cluster; drop --topology")
        topo = read_topology_file(topology_file, minipod_level=config.minipod_level)
        free = read_free_file(free_file) if free_file else topo.nodes
        view = offline_cluster(topo, gpus_per_node or 8, free)
        g = gpus_per_node or 8
    else:
        slurm = Slurm()
        view = live_cluster(slurm, minipod_level=config.minipod_level,
                            partition=config.partition)
        if free_file:
            view.free &= set(read_free_file(free_file))
        g = gpus_per_node or view.common_gpus()
    par = Parallelism.sized(tp, pp, dp, nodes, g, cp=cp, ep=ep, nvlink=nvlink_group)
    job = par.shape(g)
    if nodes is not None and dp is not None and job.nodes != nodes:
        raise ArnoldError(f"--nodes {nodes} does not match TP x CP x PP x DP = {job.gpus} GPUs "
                          f"= {job.nodes} nodes of {g} GPUs; drop one of --nodes/--dp")
    if align == "auto":
        if model_name is not None:
            if dp_volume or pp_volume:
                raise click.UsageError("give --model or --dp-volume/--pp-volume, not both")
            if global_batch is None:
                raise click.UsageError("--align auto with --model needs --global-batch")
            # Gradients are reduced over DP x CP ranks.
            alpha = alpha_from_model(model_name, global_batch, tp=tp, pp=pp, dp=par.dp * par.cp,
                                     micro_batch=micro_batch, network=config.network)
        else:
            alpha = auto_alpha(dp_bytes=parse_bytes(dp_volume or "0"),
                               pp_bytes=parse_bytes(pp_volume or "0"), dp=job.dp,
                               microbatches=microbatches, network=config.network)
    alpha = check_alpha(0.5 if alpha is None else alpha)
    weights = resolve_weights(view.topology, alpha, config.network, site=config.tier_weights,
                              user=tier_weights)
    if algo == "slurm":
        # On NVLink domains, as a user would ask: one TP group per segment.
        chosen = slurm_choice(Slurm(), view, job.nodes, segment=job.nodes_per_unit)
        result = place_from_node_list("slurm", chosen, view.topology, job, alpha)
    else:
        left = max(0.1, time_limit - (time.monotonic() - started))
        result = place(view.topology, view.free, job, algo=algo, alpha=alpha,
                       time_limit=left, seed=seed, weights=weights)
    theirs = None
    explain = explain_to is not None
    if explain_to:
        picture_path = explain_to
    if explain:
        from slurm_arnold.explain import picture, slurm_reference, table

        theirs = slurm_reference(view, job, alpha, None if topology_file else Slurm())
        picture(result, theirs, view, Path(picture_path))
    if as_json:
        per_tier, objective = objective_per_tier(
            spreads_per_tier(result.cells, view.topology), weights)
        doc = result.as_json() | {"per_tier": per_tier, "tier_objective": objective}
        if not par.plain:
            doc["parallelism"] = par.as_json()
        if theirs is not None:
            doc["explain"] = {"slurm": theirs.as_json(), "picture": picture_path}
        click.echo(json.dumps(doc))
        return
    _print_placement(result, view.topology, par)
    if theirs is not None:
        click.echo(table(result, theirs, view.topology))
        click.echo(f"picture: {picture_path}")


def _tier_weights(values: tuple[str, ...]) -> dict[str, float | tuple[float, float]]:
    """``--tier-weight`` values as ``weights.resolve`` takes them (a usage error when malformed:
    checked before the cluster is asked)."""
    try:
        return parse_tier_weights(values)
    except ArnoldError as e:
        raise click.BadParameter(str(e).removeprefix("--tier-weight "),
                                 param_hint="'--tier-weight'") from None


def _print_placement(result: Placement, topo: Topology, par: Parallelism | None = None) -> None:
    m = result.metrics
    par = par or Parallelism.of(result.job)
    sizes = f"TP{par.tp} x " + (f"CP{par.cp} x " if par.cp > 1 else "") + \
        f"PP{par.pp} x DP{par.dp}" + (f" (EP{par.ep})" if par.ep > 1 else "") + \
        ("" if par.nvlink == "tp" else f", NVLink group {par.nvlink.upper().replace('-', ' x ')}")
    table = Table(title=f"{result.algo}: {sizes} on {result.job.nodes} nodes, "
                        f"alpha {result.alpha}")
    table.add_column("stage (DP group)")
    table.add_column("nodes")
    table.add_column("minipods")
    rows: dict[int, list[str]] = {}
    for (pp, _col), nodes in sorted(result.cells.items()):
        rows.setdefault(pp, []).extend(nodes)
    for pp, nodes in rows.items():
        table.add_row(str(pp), hostlist.collect_hostlist(nodes),
                      str(len({topo.minipod_of(n) for n in nodes})))
    console = Console(soft_wrap=True)
    console.print(table)
    gap = "n/a" if result.gap is None else f"{result.gap:.2%}"
    console.print(f"max DP spread {m.max_dp_spread}, max PP spread {m.max_pp_spread}, "
                  f"weighted {m.weighted_spread}, minipods used {m.minipods_used}, "
                  f"solved in {result.solve_seconds:.2f} s, gap {gap}")
    traded = explain(result.info.get("dominance") if result.info else None)
    if traded:
        console.print(traded)

