"""``arnold plan``: which parallel layout a training job should use (or what a given one costs)."""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

import click
from click.core import ParameterSource

from site_config import load_config
from slurm_arnold.cli.options import json_option, topology_option
from slurm_arnold.errors import ArnoldError

log = logging.getLogger("arnold.plan")


@click.command("plan")
@click.option("--model", "model_name",
              help="A catalogue model (gpt-1.7b ... gpt-1008b, gpt3-175b, llama2-7b, "
                   "llama3-70b, llama3-405b, mixtral-8x7b, bert-large) or a TOML file.")
@click.option("--gpus", type=click.IntRange(min=1), help="GPUs of the job.")
@click.option("--global-batch", type=click.IntRange(min=1), help="Sequences per iteration.")
@click.option("--seq", type=click.IntRange(min=1), help="Sequence length (default: the model's).")
@click.option("--gpu", "gpu_name", default="h100-80g", show_default=True,
              help="a100-80g, h100-80g, h200, or a TOML file.")
@click.option("--gpus-per-node", type=click.IntRange(min=1), default=8, show_default=True,
              help="GPUs per node (decides which groups fit in one node's NVLink).")
@topology_option("topology.conf: its leaf size decides which groups cross the core "
                 "(default: the live cluster's, else 32 nodes).")
@click.option("--evaluate", is_flag=True, help="Price the layout given by --tp/--pp/... instead "
                                                 "of searching.")
@click.option("--tp", type=click.IntRange(min=1), help="With --evaluate: tensor-parallel size.")
@click.option("--pp", type=click.IntRange(min=1), help="With --evaluate: pipeline stages.")
@click.option("--dp", type=click.IntRange(min=1), help="Default: the GPUs left.")
@click.option("--cp", type=click.IntRange(min=1), default=1, show_default=True,
              help="With --evaluate: context-parallel size.")
@click.option("--ep", type=click.IntRange(min=1), default=1, show_default=True,
              help="With --evaluate: expert-parallel size (MoE models).")
@click.option("--micro-batch", type=click.IntRange(min=1), default=1, show_default=True,
              help="With --evaluate: sequences per micro-batch.")
@click.option("--zero", type=click.IntRange(min=0, max=3), default=1, show_default=True,
              help="With --evaluate: ZeRO stage (0 none, 1 optimizer, 2 +gradients, 3 +weights).")
@click.option("--recompute", type=click.Choice(["none", "selective", "full"]), default="full",
              show_default=True, help="With --evaluate: activation recomputation.")
@click.option("--interleave", type=click.IntRange(min=1), default=1, show_default=True,
              help="With --evaluate: virtual stages per pipeline rank (interleaved 1F1B).")
@click.option("--stages", "stages_text",
              help="Layers per stage, first to last, e.g. 9,10,10,9 (default: equal stages, "
                   "or the dynamic program's best cut where --pp does not divide the layers).")
@click.option("--attention", type=click.Choice(["flash", "eager"]), default="flash",
              show_default=True,
              help="flash: FlashAttention, scores never stored; eager: stored (the formula of "
                   "Korthikanti et al., for runs made without FlashAttention).")
@click.option("--sequence-parallel/--no-sequence-parallel", default=True, show_default=True,
              help="Whether the stack splits the layer norms and dropouts over the TP ranks "
                   "(Megatron-LM's --sequence-parallel, Korthikanti et al. 2022; runs before "
                   "2022 did not).")
@click.option("--rank-order", type=click.Choice(["tp-dp-pp", "tp-pp-dp"]), default="tp-dp-pp",
              show_default=True, help="How the ranks fill nodes and leaves (--evaluate).")
@click.option("--explain", is_flag=True,
              help="Also say where the step's time goes and what the network is taken to be.")
@click.option("--nest-input", "nest_input", type=click.Path(dir_okay=False),
              help="NEST's solver input (the JSON its nest.py writes): search it on NEST's own "
                   "costs and report the layout and time per batch in NEST's units. Needs no "
                   "other option.")
@json_option()
def plan(model_name: str | None, gpus: int | None, global_batch: int | None,
         seq: int | None, gpu_name: str, gpus_per_node: int, topology_file: str | None,
         evaluate: bool, tp: int | None,
         pp: int | None, dp: int | None, cp: int, ep: int, micro_batch: int, zero: int,
         recompute: str, interleave: int, stages_text: str | None, attention: str,
         sequence_parallel: bool, rank_order: str, explain: bool, nest_input: str | None,
         as_json: bool) -> None:
    """The fastest TP/PP/DP/CP/EP, rank order, stage cut, ZeRO stage, recomputation and
    micro-batch that fit (exact over its space: NEST's dynamic program for the cut, priced by the
    cost model in slurm_arnold/plan/cost.py); or, with --evaluate, what a given layout costs."""
    from slurm_arnold.plan.catalog import load_gpu, load_model
    from slurm_arnold.plan.cost import Layout
    from slurm_arnold.plan.search import CHOOSABLE, evaluate_best, plan_json, search, why

    ctx = click.get_current_context()
    if nest_input is not None:
        extra = [_given_flag(param, ctx.params[param.name]) for param in ctx.command.params
                 if param.name not in ("nest_input", "as_json") and param.name is not None
                 and ctx.get_parameter_source(param.name) != ParameterSource.DEFAULT]
        if extra:
            raise click.UsageError(f"--nest-input takes everything from the file; drop "
                                   f"{', '.join(extra)}")
        _plan_nest(nest_input, as_json)
        return
    for value, flag in ((model_name, "--model"), (gpus, "--gpus"),
                        (global_batch, "--global-batch")):
        if value is None:
            raise click.UsageError(f"Missing option '{flag}' (or give --nest-input FILE)")
    assert model_name is not None and gpus is not None and global_batch is not None
    model = load_model(model_name)
    if seq is not None:
        model = dataclasses.replace(model, seq_len=seq)
    gpu = load_gpu(gpu_name)
    config = load_config()
    network = config.network
    leaf_nodes, leaf_source = _leaf_nodes(topology_file, config.minipod_level)
    if evaluate:
        if tp is None or pp is None:
            raise click.UsageError("--evaluate needs --tp and --pp")
        dp = dp if dp is not None else gpus // (tp * pp * cp)
        layout = Layout(tp, pp, dp, micro_batch=micro_batch, zero=zero, recompute=recompute,
                        interleave=interleave, cp=cp, ep=ep, stages=_stages(stages_text),
                        order=rank_order, attention=attention,
                        sequence_parallel=sequence_parallel)
        if layout.gpus != gpus:
            raise ArnoldError(f"TP x PP x DP x CP = {tp} x {pp} x {dp} x {cp} = {layout.gpus}"
                              f" GPUs, not --gpus {gpus}; fix --dp or --gpus")
        cut_from = "given" if layout.stages else "equal" if model.layers % pp == 0 \
            else "dynamic program"
        option_of = {"recompute": "recompute", "micro_batch": "micro_batch", "zero": "zero",
                     "interleave": "interleave", "order": "rank_order"}
        given = {f for f in CHOOSABLE
                 if ctx.get_parameter_source(option_of[f]) != ParameterSource.DEFAULT}
        layout, est, chosen = evaluate_best(model, gpu, network, layout, given, global_batch,
                                            gpus_per_node=gpus_per_node, leaf_nodes=leaf_nodes)
        doc = plan_json(model, layout, est) | {
            "cut": cut_from, "chosen": chosen + (["stages"] if cut_from == "dynamic program"
                                                 else [])}
    else:
        result = search(model, gpu, network, gpus, global_batch, gpus_per_node=gpus_per_node,
                        leaf_nodes=leaf_nodes, attention=attention,
                        sequence_parallel=sequence_parallel)
        best = (result.layout, result.estimate)
        alternatives: list[dict[str, Any]] = [
            plan_json(model, lay, est) | {"slower_by": why(best, (lay, est))}
            for lay, est in result.alternatives]
        for alt in alternatives:
            alt.pop("alternatives")
        doc = plan_json(model, result.layout, result.estimate,
                        search_seconds=result.search_seconds, alternatives=alternatives)
        doc["evaluated"] = result.evaluated
    doc["leaf_nodes"] = leaf_nodes
    doc["leaf_nodes_from"] = leaf_source
    if as_json:
        click.echo(json.dumps(doc))
        return
    click.echo(f"{model.name} on {gpus} x {gpu.name}, global batch {global_batch}: "
               f"TP {doc['tp']} x PP {doc['pp']} x DP {doc['dp']}, micro-batch "
               f"{doc['micro_batch']}, ZeRO-{doc['zero']}, recompute {doc['recompute']}, "
               f"interleave {doc['interleave']}"
               + (f", CP {doc['cp']}" if doc["cp"] > 1 else "")
               + (f", EP {doc['ep']}" if doc["ep"] > 1 else "")
               + f", rank order {doc['rank_order']}"
               + (f", {doc['attention']} attention" if doc["attention"] != "flash" else "")
               + ("" if doc["sequence_parallel"] else ", no sequence parallelism"))
    sizes = [b - a + 1 for a, b in doc["stages"]]
    if len(set(sizes)) > 1:
        click.echo(f"  layers per stage: {','.join(map(str, sizes))}")
    click.echo(f"  step {doc['step_seconds']} s, {doc['tflops_per_gpu']} TFLOP/s per GPU "
               f"(model FLOPs, MFU {doc['mfu']:.0%}), {doc['memory_gib_per_gpu']} GiB per GPU"
               + ("" if doc["fits"] else " (does NOT fit)"))
    if explain:
        names = {"compute_seconds": "compute (slowest stage)", "bubble_seconds": "pipeline bubble",
                 "tp_seconds": "TP/CP/EP communication", "pp_seconds": "PP sends",
                 "dp_seconds": "DP gradient sync (exposed)"}
        for key, value in doc["breakdown"].items():
            if key in names:
                click.echo(f"    {names[key]:<28} {value:>9.3f} s "
                           f"({value / doc['step_seconds']:.0%})")
        click.echo(f"    network: {leaf_nodes} nodes per leaf ({leaf_source}); NVLink "
                   f"{network.nvlink.bandwidth_gbps:g} Gb/s, leaf {network.leaf.bandwidth_gbps:g}"
                   f" Gb/s, core {network.core.bandwidth_gbps:g} Gb/s / "
                   f"{network.core.oversubscription:g} (site config [network])")
    for alt in doc["alternatives"]:
        click.echo(f"  vs TP {alt['tp']} PP {alt['pp']} DP {alt['dp']} mb {alt['micro_batch']}"
                   f" ZeRO-{alt['zero']} {alt['recompute']} v{alt['interleave']}"
                   + (f" CP {alt['cp']}" if alt["cp"] > 1 else "")
                   + (f" EP {alt['ep']}" if alt["ep"] > 1 else "")
                   + f" {alt['rank_order']}: {alt['step_seconds']} s ({alt['slower_by']})")


def _plan_nest(path: str, as_json: bool) -> None:
    """``--nest-input``: NEST's own instance searched on NEST's own costs."""
    from slurm_arnold.plan.nest_costs import plan_doc, search_nest
    from slurm_arnold.plan.nest_input import read_nest_input

    inst = read_nest_input(path)
    doc = plan_doc(inst, search_nest(inst))
    if as_json:
        click.echo(json.dumps(doc))
        return
    click.echo(f"NEST instance {path}: TP {doc['tp']} x PP {doc['pp']} x DP {doc['dp']}"
               + (f" x EP {doc['ep']}" if doc["ep"] > 1 else "")
               + (f" x CP {doc['cp']}" if doc["cp"] > 1 else "")
               + f" on {doc['devices_used']} of {doc['max_devices']} devices")
    click.echo(f"  time per batch {doc['finalTimePerBatch']:,.1f} in NEST's units (its "
               f"estimator's per-layer latencies); slowest stage {doc['bottleneck']:,.2f}")
    click.echo(f"  nodes per stage: {','.join(map(str, doc['nodes_per_stage']))} "
               f"(first stage: nodes {doc['stages'][0]['nodes'][0]}.."
               f"{doc['stages'][0]['nodes'][-1]})")
    click.echo(f"  searched TP widths {','.join(map(str, doc['tp_widths']))}, "
               f"{doc['layouts_priced']} layouts priced in full, {doc['search_seconds']} s")


def _leaf_nodes(topology_file: str | None, minipod_level: int) -> tuple[int, str]:
    """Nodes under one leaf switch, and where that came from: the file given, else the live
    cluster's topology, else the planner's default (no Slurm here: the planner needs none)."""
    from slurm_arnold.plan.cost import LEAF_NODES
    from slurm_arnold.topology import read_topology_file

    if topology_file:
        topo = read_topology_file(topology_file)
        return max(len(topo.nodes_under(leaf)) for leaf in topo.leaves()), "topology file"
    try:
        from slurm_arnold.slurm import Slurm
        from slurm_arnold.snapshot.live import live_cluster

        topo = live_cluster(Slurm(), minipod_level=minipod_level).topology
        return max(len(topo.nodes_under(leaf)) for leaf in topo.leaves()), "live cluster"
    except ArnoldError as exc:
        log.info("no live topology (%s); %d nodes per leaf assumed", exc, LEAF_NODES)
        return LEAF_NODES, "default"


def _given_flag(param: click.Parameter, value: object) -> str:
    """The spelling of ``param`` the user typed: ``--no-x`` for an on/off flag given off."""
    secondary = getattr(param, "secondary_opts", [])
    return secondary[0] if secondary and value is False else param.opts[0]


def _stages(text: str | None) -> tuple[int, ...]:
    if not text:
        return ()
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ArnoldError(f"--stages {text!r}: give layer counts separated by commas, "
                          "e.g. 9,10,10,9") from None
