"""The ``arnold`` command: a thin click layer over the library.

Exit codes, for every command: 0 success; 1 an error we report (bad input, infeasible request,
Slurm failure) as one line on stderr naming the problem and the fix; 2 a usage error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

import click
import hostlist
from rich.console import Console
from rich.table import Table
from rich.tree import Tree

from site_config import SiteConfig, load_config
from slurm_arnold.errors import ArnoldError
from slurm_arnold.options import (
    Finite,
    json_option,
    minipod_level_option,
    parallelism_options,
    sim_settings,
    topology_option,
)
from slurm_arnold.placement import Parallelism, Placement, place
from slurm_arnold.placement.align import alpha_from_model, auto_alpha, parse_bytes
from slurm_arnold.placement.dominate import explain
from slurm_arnold.placement.engine import (
    ALGOS,
    DEFAULT_TIME_LIMIT,
    OFFLINE_ALGOS,
    check_alpha,
    place_from_node_list,
)
from slurm_arnold.placement.plan import spreads_per_tier
from slurm_arnold.placement.weights import objective_per_tier, parse_tier_weights
from slurm_arnold.placement.weights import resolve as resolve_weights
from slurm_arnold.sim import PREDICTORS
from slurm_arnold.slurm import Slurm
from slurm_arnold.snapshot.live import live_cluster, slurm_choice
from slurm_arnold.snapshot.view import ClusterView, offline_cluster, read_free_file
from slurm_arnold.topology import Topology, read_topology_file, tiers

#: Command groups kept in their own modules, imported only when invoked (or listed): every
#: `arnold place` and arnold-sbatch pays the start-up time of whatever is imported here.
LAZY_GROUPS = {
    "bench": "slurm_arnold.bench_cli",
    "pipeline": "slurm_arnold.pipeline_cli",
    "plan": "slurm_arnold.plan_cli",
    "report": "slurm_arnold.report_cli",
    "reserve": "slurm_arnold.reserve_cli",
    "site": "slurm_arnold.site_cli",
}


class ArnoldGroup(click.Group):
    """A click group that turns library errors into one-line messages and exit code 1, and
    loads the groups of ``LAZY_GROUPS`` on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command, the lazily loaded ones included."""
        return sorted({*super().list_commands(ctx), *LAZY_GROUPS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command named ``cmd_name``, importing its module if it is a lazy group."""
        if cmd_name in LAZY_GROUPS and cmd_name not in self.commands:
            import importlib

            module = importlib.import_module(LAZY_GROUPS[cmd_name])
            self.add_command(getattr(module, cmd_name))
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; report ``ArnoldError`` as ``arnold: error: ...`` and exit 1."""
        try:
            return super().invoke(ctx)
        except ArnoldError as exc:
            click.echo(f"arnold: error: {exc}", err=True)
            ctx.exit(1)
        except (click.exceptions.ClickException, click.exceptions.Exit,
                click.exceptions.Abort, KeyboardInterrupt):
            raise
        except Exception as exc:
            click.echo(f"arnold: error: {unexpected(exc)}", err=True)
            ctx.exit(1)


def unexpected(exc: BaseException) -> str:
    """One line for an error we did not foresee: what the system said for a file it could not
    use, else the exception and a request to report it; the traceback with -vv."""
    import traceback

    if logging.getLogger().isEnabledFor(logging.DEBUG):
        traceback.print_exception(exc, file=sys.stderr)
    if isinstance(exc, OSError) and exc.strerror:
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror}"
    return (f"unexpected {type(exc).__name__}: {exc}; this is a bug in arnold: please report "
            "it with the same command's output under -vv")


def setup_logging(verbose: int) -> None:
    """Logs go to stderr: WARNING by default, INFO with -v, DEBUG (every Slurm command) with -vv."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="arnold: %(levelname)s: %(name)s: %(message)s")


@click.group(cls=ArnoldGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More logging on stderr (-vv: every command).")
@click.version_option(package_name="slurm-arnold")
def main(verbose: int) -> None:
    """Topology-aware placement and scheduling of LLM training jobs on Slurm."""
    setup_logging(verbose)


@main.group()
def topology() -> None:
    """Inspect the cluster's fat-tree topology."""


def topology_json(view: ClusterView) -> dict[str, Any]:
    """The ``arnold topology show --json`` object: every switch, every node expanded."""
    topo = view.topology
    switches = [
        {"name": s.name, "level": s.level, "kind": _kind(view, s.name), "parent": s.parent,
         "children": list(s.children)}
        for s in topo.switches.values()
    ]
    nodes = []
    for name in topo.nodes:
        info = view.nodes.get(name)
        nodes.append({
            "name": name,
            "leaf": topo.leaf_of(name),
            "minipod": topo.minipod_of(name),
            "state": info.state_text if info else "unknown",
            "gpus_total": info.gpus_total if info else 0,
            "gpus_free": info.gpus_free if info and name in view.free else 0,
            "free": name in view.free,
            "domain": topo.domain_of(name),
            "path": topo.path_of(name),
        })
    return {"switches": switches, "nodes": nodes, "tiers": tiers(topo),
            "block_sizes": list(topo.block_sizes), "domains": _domains_json(view)}


def _domains_json(view: ClusterView) -> list[dict[str, Any]]:
    """Each NVLink domain with its nodes and how many are free (whole: all of them)."""
    members: dict[str, list[str]] = {}
    for node, domain in view.topology.domains.items():
        members.setdefault(domain, []).append(node)
    return [{"name": name, "nodes": len(nodes),
             "free": sum(1 for n in nodes if n in view.free),
             "whole_free": all(n in view.free for n in nodes)}
            for name, nodes in members.items()]


def _kind(view: ClusterView, switch: str) -> str:
    topo = view.topology
    if switch == topo.root.name:
        return "core"
    if switch in set(topo.minipods()):
        return "minipod"
    return "leaf" if topo.switches[switch].is_leaf else "switch"


def render_tree(view: ClusterView) -> Tree:
    """A rich tree of switches with free/total GPUs, leaves with their nodes' states."""
    topo = view.topology

    def label(name: str) -> str:
        free, total = view.gpus_under(name)
        kind = "NVLink domain" if topo.domains and name in topo.domains.values() \
            else _kind(view, name)
        return f"[bold]{name}[/bold] ({kind}) {free}/{total} GPUs free"

    def add(parent: Tree, name: str) -> None:
        sw = topo.switches[name]
        branch = parent.add(label(name))
        if sw.is_leaf:
            groups: dict[tuple[str | None, str], list[str]] = {}
            for node in sw.children:
                info = view.nodes.get(node)
                state = "free" if node in view.free else info.state_text if info else "unknown"
                groups.setdefault((topo.domain_of(node), state), []).append(node)
            for (domain, state), members in groups.items():
                colour = "green" if state == "free" else "red"
                where = f" (NVLink domain {domain})" if domain and domain != name else ""
                branch.add(f"{hostlist.collect_hostlist(members)} [{colour}]{state}[/{colour}]"
                           f"{where}")
        else:
            for child in sw.children:
                add(branch, child)

    root = Tree(label(topo.root.name))
    for child in topo.root.children:
        add(root, child)
    return root


def load_view(config: SiteConfig, topology_file: str | None, gpus_per_node: int,
              partition: str | None) -> ClusterView:
    """The live cluster, or the offline one a topology file describes."""
    if topology_file:
        topo = read_topology_file(topology_file, minipod_level=config.minipod_level)
        return offline_cluster(topo, gpus_per_node)
    return live_cluster(Slurm(), minipod_level=config.minipod_level,
                        partition=partition or config.partition)


@topology.command("show")
@topology_option("Read this topology file instead of the live cluster: topology/tree's or "
                 "topology/block's topology.conf, or Slurm's topology.yaml (tree and blocks).")
@click.option("--gpus-per-node", type=click.IntRange(min=1), default=8, show_default=True,
              help="GPUs per node when reading a topology file.")
@click.option("--partition", help="Partition whose nodes count as free (default: Slurm's).")
@minipod_level_option()
@json_option()
def topology_show(topology_file: str | None, gpus_per_node: int, partition: str | None,
                  minipod_level: int | None, as_json: bool) -> None:
    """Print the switch tree with free/total GPUs per switch."""
    config = load_config({"minipod_level": minipod_level, "partition": partition})
    view = load_view(config, topology_file, gpus_per_node, partition)
    if as_json:
        click.echo(json.dumps(topology_json(view)))
        return
    Console(soft_wrap=True).print(render_tree(view))




@main.command("place")
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


@main.command("sim")
@click.option("--swf", "swf_file", type=click.Path(dir_okay=False, exists=True),
              help="A Standard Workload Format log (plain or .gz).")
@click.option("--csv", "csv_file", type=click.Path(dir_okay=False, exists=True),
              help="A CSV job history with the documented header.")
@topology_option("The fat tree to replay on (topology.conf format).", required=True)
@click.option("--gpus-per-node", type=click.IntRange(min=1), default=8, show_default=True,
              help="GPUs per node.")
@click.option("--gpus-per-proc", type=Finite(min=0, min_open=True), default=1.0,
              show_default=True, help="GPUs per processor of the log.")
@click.option("--lpj-gpus", type=click.IntRange(min=1), default=256, show_default=True,
              help="A job with at least this many GPUs is a large job (LPJ).")
@click.option("--policy", type=click.Choice(["slurm", "arnold"]), required=True,
              help="Slurm's backfill, or Arnold's reservations on top of it.")
@click.option("--predictor", "predictor_name", type=click.Choice(PREDICTORS),
              help="Run-time predictor [default: model_q for arnold, requested for slurm].")
@click.option("--mode", type=click.Choice(["share", "shrink"]), default="share",
              show_default=True, help="What an admitted short job risks (arnold only).")
@click.option("--placement", type=click.Choice(OFFLINE_ALGOS),
              default="mip", show_default=True, help="How arnold lays out an LPJ.")
@minipod_level_option()
@click.option("--depth", type=click.IntRange(min=1), default=100, show_default=True,
              help="Pending jobs tested per scheduling pass (bf_max_job_test).")
@click.option("--max-reservations", type=click.IntRange(min=0), default=4, show_default=True,
              help="LPJ reservations at once (arnold).")
@click.option("--spread-weight-h", type=Finite(min=0), default=1.0,
              show_default=True, help="Hours of expected wait one unit of spread is worth.")
@click.option("--horizon-h", type=Finite(min=0, min_open=True), default=2.0,
              show_default=True, help="Reserve only LPJs whose nodes drain within this.")
@click.option("--keep-domains-whole/--no-keep-domains-whole", default=True, show_default=True,
              help="On a topology with NVLink domains (blocks): arnold picks nodes of partly "
                   "used domains before whole ones.")
@click.option("--jobs-csv", type=click.Path(dir_okay=False, writable=True),
              help="Also write each job's submit, start, end and wait to this CSV.")
@click.option("--skip-jobs", type=click.IntRange(min=0), default=0, show_default=True,
              help="Replay the log's jobs after its first this many (readable ones).")
@click.option("--max-jobs", type=click.IntRange(min=1),
              help="Replay at most this many jobs (after --skip-jobs) [default: all].")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", callback=sim_settings,
              help="Set any other simulator setting (SimSettings; docs/sim.md), e.g. "
                   "--set lpj_jumps_pay=expected --set plans_past_reservations=true. "
                   "Repeatable.")
@json_option()
def sim_cmd(swf_file: str | None, csv_file: str | None, topology_file: str,
            gpus_per_node: int, gpus_per_proc: float, lpj_gpus: int, policy: str,
            predictor_name: str | None, mode: str, placement: str, minipod_level: int | None,
            depth: int, max_reservations: int, spread_weight_h: float, horizon_h: float,
            keep_domains_whole: bool, jobs_csv: str | None, skip_jobs: int,
            max_jobs: int | None, overrides: tuple[tuple[str, Any], ...], as_json: bool) -> None:
    """Replay a job log on a fat tree under Slurm's backfill or Arnold's policy."""
    from predictor.swf import BadLine, JobRecord
    from slurm_arnold.sim.cluster import SimCluster
    from slurm_arnold.sim.engine import SimSettings, Simulation
    from slurm_arnold.sim.jobs import build_workload, open_jobs_csv, write_jobs_csv

    items = _read_log(swf_file, csv_file)
    bad = [i for i in items if isinstance(i, BadLine)]
    if bad:
        click.echo(f"arnold: {len(bad)} unreadable lines skipped (first: line {bad[0].line}: "
                   f"{bad[0].problem})", err=True)
    if minipod_level is None:
        minipod_level = load_config().minipod_level
    topo = read_topology_file(topology_file, minipod_level=minipod_level)
    cluster = SimCluster(topo, gpus_per_node)
    records = [i for i in items if isinstance(i, JobRecord)]
    # The slices of `arnold bench sim` (e.g. its --held-out jobs) are cut the same way.
    records = records[skip_jobs:None if max_jobs is None else skip_jobs + max_jobs]
    if not records:
        raise click.UsageError(f"--skip-jobs {skip_jobs} leaves no job of the log's "
                               f"{len(items) - len(bad)}; skip fewer")
    workload = build_workload(records, gpus_per_node=gpus_per_node, gpus_per_proc=gpus_per_proc,
                              cluster_gpus=cluster.total_gpus, lpj_gpus=lpj_gpus)
    settings = SimSettings(policy=policy, mode=mode, placement=placement,
                           predictor=predictor_name or ("model_q" if policy == "arnold"
                                                        else "requested"),
                           depth=depth, max_reservations=max_reservations,
                           spread_weight_h=spread_weight_h, reserve_horizon_h=horizon_h,
                           keep_domains_whole=keep_domains_whole)
    settings = dataclasses.replace(settings, **dict(overrides))
    sink = open_jobs_csv(Path(jobs_csv)) if jobs_csv else contextlib.nullcontext()
    with sink as out, _progress() as bar:
        task = bar.add_task(f"sim {policy}", total=len(workload.jobs))
        replay = Simulation(cluster, workload, settings,
                            progress=lambda n: bar.advance(task, n))
        result = replay.run()
        if out is not None:
            write_jobs_csv(out, replay.jobs)
    result["n_bad_lines"] = len(bad)
    if as_json:
        click.echo(json.dumps(result))
        return
    table = Table(title=f"{policy} ({settings.predictor}"
                        + (f", {mode}" if policy == "arnold" else "") + f"): "
                        f"{result['jobs']} jobs, {result['lpjs']} LPJs")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key in ("utilization", "mean_wait_h", "bounded_slowdown", "lpj_mean_wait_h",
                "lpj_p95_wait_h", "lpj_mean_weighted_spread", "backfilled_in_reservations",
                "reserved_idle_node_h", "lpj_delay_h_from_mispredictions", "killed_jobs",
                "dropped_jobs") + (("domains", "whole_domains_free_mean")
                                   if result["domains"] else ()):
        table.add_row(key, str(result[key]))
    Console(soft_wrap=True).print(table)


#: A job's status after the admin side's last move of it (``bindings.kind``).
BINDING_STATUS = {"bind": "bound", "repair": "repaired", "replan": "replanned",
                  "start": "mapped at start"}


@main.command("jobs")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True,
              help="How many of the most recent jobs.")
@json_option("one JSON list")
def jobs_cmd(limit: int, as_json: bool) -> None:
    """Jobs submitted through arnold-sbatch: shape, placement, spreads, rank-order file."""
    from reservations.records import Records
    from slurm_arnold.errors import StateError
    from slurm_arnold.site_state import caller, open_site_db, open_user_db, user_db_path

    config = load_config()
    mine = user_db_path(config, caller())
    # Listing makes nothing: a user who never submitted has no database yet.
    db = open_user_db(config) if mine.exists() else None
    records = db.jobs(limit=limit) if db is not None else []
    moves: dict[int, list[dict[str, object]]] = {}
    try:  # the admin side's later moves of these jobs (reservations.binder)
        if records and config.db_path.exists():
            moves = Records(open_site_db(config)).bindings_of(
                [int(r["slurm_job_id"]) for r in records if r["slurm_job_id"]])
    except StateError:
        pass
    rows = []
    for r in records:
        spec = json.loads(r["spec"] or "{}")
        placement = json.loads(r["placement"] or "{}")
        row = {
            "id": r["id"], "slurm_job_id": r["slurm_job_id"], "user": r["user"],
            "status": r["status"], "tp": spec.get("tp"), "pp": spec.get("pp"),
            "dp": spec.get("dp"), "placement": spec.get("placement"),
            "alpha": spec.get("alpha"), "metrics": placement.get("metrics"),
            "nodes": placement.get("nodes", []), "rankfile": r["rankfile"], "binding": None,
        }
        history = moves.get(int(r["slurm_job_id"] or 0))
        if history:
            last = history[-1]
            row["binding"] = {"kind": last["kind"], "reason": last["reason"],
                              "decided_at": last["decided_at"],
                              "previous": json.loads(str(last["previous"] or "[]")),
                              "weighted_spread": last["weighted_spread"], "moves": len(history)}
            row["nodes"] = json.loads(str(last["nodes"]))
            row["rankfile"] = last["rankfile"]
            row["status"] = BINDING_STATUS.get(str(last["kind"]), str(last["kind"]))
        rows.append(row)
    if as_json:
        click.echo(json.dumps(rows))
        return
    from slurm_arnold.tables import show
    from slurm_arnold.tables import table as new_table

    table = new_table("job", "user", "status", "TPxPPxDP", "placement", "DP/PP spread",
                      "nodes", "rank-order file", title=f"arnold jobs ({mine})")
    for row in rows:
        m = row["metrics"] or {}
        table.add_row(str(row["slurm_job_id"]), row["user"], row["status"],
                      f"{row['tp']}x{row['pp']}x{row['dp']}", str(row["placement"]),
                      f"{m.get('max_dp_spread')}/{m.get('max_pp_spread')}",
                      hostlist.collect_hostlist(row["nodes"]), row["rankfile"] or "")
    show(table)


@main.group()
def predictor() -> None:
    """The job-completion-time predictor (LightGBM)."""


def _read_log(swf_file: str | None, csv_file: str | None) -> list[Any]:
    """Records and bad lines of the one log given."""
    from predictor.swf import read_csv, read_swf

    if (swf_file is None) == (csv_file is None):
        raise click.UsageError("give exactly one of --swf and --csv")
    return list(read_swf(Path(swf_file)) if swf_file else read_csv(Path(csv_file or "")))


def _progress() -> Any:
    """A progress bar on stderr (quiet when stderr is not a terminal)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    return Progress("[progress.description]{task.description}", BarColumn(),
                    MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=True,
                    disable=not sys.stderr.isatty())


def _import(source: str, items: Any, total: int | None) -> None:
    """Import records into the state database with a progress bar; report on stderr."""
    import itertools

    from predictor.history import import_records
    from predictor.swf import BadLine
    from slurm_arnold.site_state import open_site_db

    config = load_config()
    # Up to the first record (or the reader's error for a file with none) before the
    # database is touched: a bad file leaves nothing behind.
    rest = iter(items)
    head = []
    for item in rest:
        head.append(item)
        if not isinstance(item, BadLine):
            break
    items = itertools.chain(head, rest)
    state = open_site_db(config, write=True)
    with _progress() as bar:
        task = bar.add_task(f"importing {source}", total=total)
        report = import_records(state, source, items,
                                progress=lambda n: bar.advance(task, n))
    click.echo(f"arnold: {report.summary()} into {config.db_path}", err=True)
    for bad in report.bad:
        logging.getLogger("arnold").info("bad line %d: %s", bad.line, bad.problem)


@predictor.group("import")
def predictor_import() -> None:
    """Import finished jobs into the history (idempotent: a re-import adds nothing)."""


@predictor_import.command("swf")
@click.argument("file", type=click.Path(dir_okay=False, exists=True))
def import_swf(file: str) -> None:
    """A Standard Workload Format log (plain or .gz)."""
    from predictor.swf import read_swf

    _import(f"swf:{Path(file).name}", read_swf(Path(file)), None)


@predictor_import.command("csv")
@click.argument("file", type=click.Path(dir_okay=False, exists=True))
def import_csv(file: str) -> None:
    """A CSV with the header job_id,user,group,partition,qos,name,submit,start,end,nodes,gpus,
    procs,time_limit,state,exit_code."""
    from predictor.swf import read_csv

    _import(f"csv:{Path(file).name}", read_csv(Path(file)), None)


@predictor_import.command("sacct")
@click.option("--since", help="Only jobs from this time on (sacct --starttime syntax).")
def import_sacct(since: str | None) -> None:
    """The live cluster's accounting (slurmdbd)."""
    from predictor.history import sacct_records

    records = sacct_records(Slurm(), since)
    _import("sacct", records, len(records))


@predictor.command("evaluate")
@click.option("--swf", "swf_file", type=click.Path(dir_okay=False, exists=True),
              help="A Standard Workload Format log (plain or .gz).")
@click.option("--csv", "csv_file", type=click.Path(dir_okay=False, exists=True),
              help="A CSV job history with the documented header.")
@click.option("--quantile", type=Finite(0.5, 0.99), default=0.9, show_default=True,
              help="Quantile of the upper model.")
@click.option("--db", "from_db", is_flag=True, help="The imported history in the state database.")
@click.option("--plot", type=click.Path(dir_okay=False),
              help="Write a calibration plot (PNG) of predicted vs actual run time here.")
@json_option()
def predictor_evaluate(swf_file: str | None, csv_file: str | None, from_db: bool,
                       quantile: float, plot: str | None, as_json: bool) -> None:
    """Train on the first 70% of a log (by submit time), test on the rest, beside the baselines."""
    from predictor.evaluate import evaluate
    from predictor.history import load_history
    from predictor.swf import BadLine, JobRecord
    from slurm_arnold.site_state import open_site_db

    if from_db:
        if swf_file or csv_file:
            raise click.UsageError("give one of --swf, --csv and --db")
        items: list[Any] = load_history(open_site_db(load_config()))
    else:
        items = _read_log(swf_file, csv_file)
    jobs = [i for i in items if isinstance(i, JobRecord)]
    bad = [i for i in items if isinstance(i, BadLine)]
    if bad:
        click.echo(f"arnold: {len(bad)} unreadable lines skipped (first: line {bad[0].line}: "
                   f"{bad[0].problem})", err=True)
    result = evaluate(jobs, quantile=quantile, keep_predictions=plot is not None)
    result["n_bad_lines"] = len(bad)
    if plot:
        from predictor.plots import calibration_plot

        calibration_plot(result.pop("predictions"), Path(plot))
        click.echo(f"arnold: calibration plot written to {plot}", err=True)
    if as_json:
        click.echo(json.dumps(result))
        return
    table = Table(title=f"{result['n_train']} train / {result['n_test']} test jobs "
                        f"({result['n_excluded']} without run or requested time)")
    keys = ("mae_h", "rmse_h", "mae_log", "rmse_log", "coverage")
    table.add_column("method")
    for k in keys:
        table.add_column(k)
    for name, m in result["methods"].items():
        table.add_row(name, *(f"{m[k]:.3f}" for k in keys))
    Console(soft_wrap=True).print(table)


@predictor.command("predict")
@click.option("--job", "job_id", type=int, help="A pending job of the live queue.")
@click.option("--user", help="Job spec: the user (default: you).")
@click.option("--time", "time_limit", help="Job spec: requested time (minutes, or [D-]HH:MM:SS).")
@click.option("--procs", type=click.IntRange(min=1), help="Job spec: processors or GPUs.")
@click.option("--group", default="", help="Job spec: group or account.")
@click.option("--partition", default="", help="Job spec: partition.")
@click.option("--qos", default="", help="Job spec: QOS (the queue, in SWF logs).")
@json_option()
def predictor_predict(job_id: int | None, user: str | None, time_limit: str | None,
                      procs: int | None, group: str, partition: str, qos: str,
                      as_json: bool) -> None:
    """Point and quantile run time of a job, with the features behind the point prediction."""
    import getpass
    import time as clock

    from predictor.history import load_history
    from predictor.service import job_from_queue, load_serving, predict_job, queue_load
    from predictor.swf import JobRecord
    from slurm_arnold.site_state import caller, open_site_db
    from slurm_arnold.slurm import parse_time_limit

    config = load_config()
    load_now = None
    if job_id is not None:
        slurm = Slurm()
        job, load_now = job_from_queue(slurm, job_id)
        if job.user != caller():
            from slurm_arnold.admins import NotAdmin, require_admin

            try:
                require_admin(slurm, "predictor predict --job")
            except NotAdmin:
                raise ArnoldError(f"job {job_id} belongs to {job.user}; only {job.user} or an "
                                  "admin may see its prediction") from None
    else:
        if time_limit is None:
            raise click.UsageError("give --job ID or a job spec with at least --time")
        try:
            seconds = parse_time_limit(time_limit)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--time") from None
        job = JobRecord("spec", user or getpass.getuser(), group, partition, qos, "",
                        int(clock.time()), None, None, None, None, procs, seconds,
                        "PENDING", None)
    model = load_serving(config)
    if load_now is None:
        try:
            load_now = queue_load(Slurm().jobs(unfinished=True), job.user,
                                  time_limit=job.time_limit, now=job.submit)
        except ArnoldError as exc:
            click.echo(f"arnold: no live queue ({exc}); queue-load features taken as empty",
                       err=True)
            load_now = {"active": 0.0, "running": 0.0, "u_active": 0.0,
                        "u_run_elapsed": math.nan, "u_run_same_elapsed": math.nan}
    # Only the user's own history matters once the load comes from the queue.
    history = load_history(open_site_db(config), user=job.user)
    pred = predict_job(model, job, history, load_now)
    if as_json:
        click.echo(json.dumps(pred.as_dict()))
        return
    click.echo(f"point {pred.point / 3600:.2f} h, q{pred.quantile:g} upper "
               f"{pred.upper / 3600:.2f} h (requested "
               f"{(pred.requested or 0) / 3600:.2f} h; user's baseline "
               f"{pred.baseline / 3600:.2f} h)")
    from predictor.service import describe

    for name, value, effect in pred.reasons:
        click.echo(f"  {name} = {describe(name, value)}: x{math.exp(effect):.2f}")


@predictor.command("retrain")
@click.option("--since", help="Import sacct jobs from this time on (default: all).")
@click.option("--no-import", is_flag=True, help="Train on the history as it is.")
@click.option("--force", is_flag=True, help="Swap even when the new model is worse.")
@json_option()
def predictor_retrain(since: str | None, no_import: bool, force: bool, as_json: bool) -> None:
    """Import finished jobs from sacct, retrain, and swap the model in if it is not worse."""
    from predictor.service import retrain
    from slurm_arnold.site_state import open_site_db

    config = load_config()
    slurm = None if no_import else Slurm()
    if slurm is not None:
        slurm.require_config()  # before the site's state is opened (and made)
    result = retrain(config, open_site_db(config, write=True), slurm=slurm,
                     since=since, force=force)
    if as_json:
        click.echo(json.dumps(result))
        return
    serving = result.get("serving")
    verdict = "swapped in" if result["swapped"] else "kept the serving model"
    click.echo(f"imported {result['imported']} jobs; {result['history_jobs']} in history; "
               f"new mae_log {result['candidate']['mae_log']:.3f}"
               + (f" vs serving {serving['mae_log']:.3f}" if serving else "")
               + (f" ({result['reason']})" if "reason" in result else "")
               + f"; {verdict}: {result['model_dir']}")
