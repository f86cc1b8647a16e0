"""``arnold pipeline``: which pipeline schedule to run when some stage boundaries are slow."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import click

from site_config import load_config
from slurm_arnold.cli.options import Finite, json_option, topology_option
from slurm_arnold.errors import ArnoldError
from slurm_arnold.pipeline.run import NAMES, run

log = logging.getLogger("arnold.pipeline")
SOLVER_SIZE = (4, 8)  # the largest stages and micro-batches `all` hands to the solver


@click.command("pipeline")
@click.option("--stages", type=click.IntRange(min=1), help="Pipeline stages P.")
@click.option("--microbatches", type=click.IntRange(min=1),
              help="Micro-batches per iteration M (with --model: from the global batch).")
@click.option("--tf", default="1", show_default=True,
              help="Forward time of one micro-batch on a stage (the time unit); one value, "
                   "or one per stage: 1,1,1,1.3.")
@click.option("--tb", default="1", show_default=True,
              help="Input-gradient (B) time, same unit and form.")
@click.option("--tw", default="1", show_default=True,
              help="Weight-gradient (W) time, same unit and form.")
@click.option("--chunks", type=click.IntRange(min=2), default=2, show_default=True,
              help="Model chunks per stage for i1f1b.")
@click.option("--chunk-shape", type=click.Choice(["loop", "v"]), default="loop",
              show_default=True,
              help="With --greedy-chunks: chunks round the stages (loop) or V-shaped (ZBV's).")
@click.option("--greedy-chunks", type=click.IntRange(min=1), default=1, show_default=True,
              help="Model chunks per stage for greedy and optimal (optimal: 1 only).")
@click.option("--mem-b", type=Finite(min=0), default=1.0, show_default=True,
              help="Activations one F leaves for B (the memory unit).")
@click.option("--mem-w", type=Finite(min=0), default=0.5, show_default=True,
              help="Of those, what W still needs after B.")
@click.option("--mem-limit", type=Finite(min=0, min_open=True),
              help="Activation memory per stage. Default: each static schedule its own peak; "
                   "greedy and optimal 1F1B's (P x --mem-b).")
@click.option("--latency", type=Finite(min=0), default=0.0, show_default=True,
              help="Latency of a message on a cross link.")
@click.option("--bandwidth-time", type=Finite(min=0), default=0.0, show_default=True,
              help="Time a message occupies a cross link (size / bandwidth).")
@click.option("--cross-links", "cross_text",
              help="Boundaries i (stage i to i+1, both directions) that pay, e.g. 3 or 1,5.")
@click.option("--sub-blocks", type=click.IntRange(min=1), default=1, show_default=True,
              help="Cut each block into this many parts the greedy may interleave "
                   "(CrossPipe's sub-blocks; other schedules run whole blocks).")
@click.option("--from-job", type=int,
              help="Take P and the cross-minipod boundaries from this arnold-sbatch job's "
                   "placement, latency and bandwidth from the site's core tier (times in s).")
@click.option("--message-bytes", help="With --from-job: bytes per PP message, e.g. 64M "
                                      "(with --model: from the model).")
@click.option("--model", "model_name",
              help="With --from-job: price the job's stages from the planner's cost model "
                   "(times in s, per stage; message size; micro-batches).")
@click.option("--global-batch", type=click.IntRange(min=1), help="With --model.")
@click.option("--gpu", "gpu_name", default="h100-80g", show_default=True, help="With --model.")
@click.option("--micro-batch", type=click.IntRange(min=1), default=1, show_default=True,
              help="With --model.")
@click.option("--recompute", type=click.Choice(["none", "selective", "full"]), default="full",
              show_default=True, help="With --model.")
@topology_option("With --from-job: topology.conf instead of the live cluster's.")
@click.option("--schedule", "name", type=click.Choice([*NAMES, "all"]), default="all",
              show_default=True, help="One schedule (--json: one object) or all of them "
                                      "(--json: a list).")
@click.option("--time-limit", type=Finite(min=0.1), default=60.0, show_default=True,
              help="Seconds the optimal schedule's solver may take.")
@click.option("--timeline", is_flag=True, help="Also draw each schedule as text (stderr with "
                                               "--json).")
@click.option("--gantt", "gantt_path", type=click.Path(dir_okay=False),
              help="Draw a PNG Gantt chart (with `all`: one per schedule, NAME inserted).")
@click.option("--explain", is_flag=True,
              help="Also draw the fastest schedule and walk its critical path (stderr with "
                   "--json).")
@json_option("one JSON object (a list with --schedule all)")
def pipeline(stages: int | None, microbatches: int | None, tf: str, tb: str, tw: str,
             chunks: int, chunk_shape: str, greedy_chunks: int, mem_b: float, mem_w: float,
             mem_limit: float | None, latency: float,
             bandwidth_time: float, cross_text: str | None, sub_blocks: int,
             from_job: int | None,
             message_bytes: str | None, model_name: str | None, global_batch: int | None,
             gpu_name: str, micro_batch: int, recompute: str, topology_file: str | None,
             name: str,
             time_limit: float, timeline: bool, gantt_path: str | None, explain: bool,
             as_json: bool) -> None:
    """Simulate pipeline schedules (1F1B, interleaved, ZB-H1, ZB-H2, CrossPipe's greedy
    delay-aware one and the solver's optimum) on links with latency and bandwidth."""
    from slurm_arnold.pipeline.model import PipelineModel

    cross = _links(cross_text)
    times: dict[str, Any] = {"tf": _times(tf, "--tf"), "tb": _times(tb, "--tb"),
                             "tw": _times(tw, "--tw")}
    if model_name is not None and from_job is None:
        raise click.UsageError("--model prices a placed job's stages: give --from-job too")
    if from_job is not None:
        links = _from_job(from_job, topology_file, stages)
        stages, cross, latency = links.stages, links.cross_links, links.latency_seconds
        if model_name is not None:
            priced = _priced(links, model_name, global_batch, gpu_name, micro_batch, recompute)
            given = [f"--{k}" for k in ("tf", "tb", "tw") if click.get_current_context()
                     .get_parameter_source(k) != click.core.ParameterSource.DEFAULT]
            if given:
                raise click.UsageError(f"--model prices the stages; drop {', '.join(given)}")
            times = {k: tuple(priced[k]) for k in ("tf", "tb", "tw")}
            microbatches = microbatches or priced["microbatches"]
        elif message_bytes is None:
            raise click.UsageError("--from-job needs --message-bytes (the activations one "
                                   "stage sends per micro-batch, e.g. 64M) or --model")
        from slurm_arnold.placement.align import parse_bytes

        size = parse_bytes(message_bytes) if message_bytes else float(priced["message_bytes"])
        bandwidth_time = size * links.seconds_per_byte
        log.info("job %d: %d stages, cross-minipod boundaries %s; latency %.3g s, %.3g s per "
                 "message of %.3g bytes", from_job, stages, sorted(cross) or "none",
                 latency, bandwidth_time, size)
    elif stages is None:
        raise click.UsageError("give --stages (or --from-job)")
    if microbatches is None:
        raise click.UsageError("give --microbatches (or --model with --from-job)")
    model = PipelineModel(stages, microbatches, times["tf"], times["tb"], times["tw"],
                          mem_b=mem_b, mem_w=mem_w,
                          mem_limit=mem_limit, latency=latency, bandwidth_time=bandwidth_time,
                          cross_links=cross, sub_blocks=sub_blocks, chunks=greedy_chunks,
                          chunk_shape=chunk_shape)
    names = [n for n in NAMES if n != "optimal" or _solver_size(model)] \
        if name == "all" else [name]
    # News, not trouble: the exact solver is for small pipelines (a line under the table).
    note = ("optimal not run: the solver is for up to {} stages and {} micro-batches; ask for "
            "it with --schedule optimal".format(*SOLVER_SIZE)
            if name == "all" and "optimal" not in names else None)
    if note:
        log.info("%s", note)
    docs = []
    runs: dict[str, tuple[Any, Any]] = {}
    for n in names:
        try:
            doc, result, used = run(model, n, chunks=chunks, time_limit=time_limit)
        except ArnoldError as exc:
            if name != "all":
                raise
            log.warning("%s skipped: %s", n, exc)
            continue
        docs.append(doc)
        runs[n] = (result, used)
        if timeline:
            from slurm_arnold.pipeline.render import timeline as draw

            click.echo(f"{n}:\n{draw(used, result)}", err=as_json)
        if gantt_path:
            from slurm_arnold.pipeline.render import gantt

            path = Path(gantt_path)
            if name == "all":
                path = path.with_name(f"{path.stem}-{n}{path.suffix or '.png'}")
            gantt(used, result, path, f"{n}: makespan {result.makespan:g}")
            log.info("%s: Gantt chart in %s", n, path)
    if not docs:
        raise ArnoldError("no schedule fits: every one was skipped (see above); raise "
                          "--mem-limit or lower the micro-batches in flight")
    if explain:
        _explain(min(docs, key=lambda d: (d["makespan"], max(d["peak_memory"]))), runs,
                 err=as_json)
    if as_json:
        click.echo(json.dumps(docs[0] if name != "all" else docs))
        return
    _print(docs)
    if note:
        click.echo(note)


def _solver_size(model: Any) -> bool:
    return bool(model.stages <= SOLVER_SIZE[0] and model.microbatches <= SOLVER_SIZE[1])


def _times(text: str, option: str) -> float | tuple[float, ...]:
    try:
        values = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise ArnoldError(f"{option} {text!r}: give a time, or one per stage separated by "
                          "commas") from None
    return values[0] if len(values) == 1 else values


def _links(text: str | None) -> frozenset[int]:
    if not text:
        return frozenset()
    try:
        return frozenset(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ArnoldError(f"--cross-links {text!r}: give boundary numbers separated by commas, "
                          "e.g. 3 or 1,5") from None


def _from_job(job_id: int, topology_file: str | None, stages: int | None) -> Any:
    """The job's ``JobLinks`` from its recorded placement and the topology."""
    from slurm_arnold.pipeline.links import links_from_job
    from slurm_arnold.site_state import open_user_db
    from slurm_arnold.topology import read_topology_file

    config = load_config()
    if topology_file:
        topology = read_topology_file(topology_file, minipod_level=config.minipod_level)
    else:
        from slurm_arnold.slurm import Slurm
        from slurm_arnold.snapshot.live import live_cluster

        topology = live_cluster(Slurm(), minipod_level=config.minipod_level).topology
    links = links_from_job(open_user_db(config), job_id, topology, config.network)
    if stages is not None and stages != links.stages:
        raise ArnoldError(f"--stages {stages} but job {job_id} has {links.stages} stages; "
                          "drop --stages")
    return links


def _priced(links: Any, model_name: str, global_batch: int | None, gpu_name: str,
            micro_batch: int, recompute: str) -> dict[str, Any]:
    """F, B, W seconds per stage, the message size and the micro-batches of the placed job's
    layout, from the planner's cost model (``plan.cost.block_times``)."""
    from slurm_arnold.plan.catalog import load_gpu, load_model
    from slurm_arnold.plan.cost import Layout, block_times

    if global_batch is None:
        raise click.UsageError("--model needs --global-batch")
    model = load_model(model_name)
    pp = links.stages
    cut = () if model.layers % pp == 0 else tuple(
        model.layers // pp + (1 if k < model.layers % pp else 0) for k in range(pp))
    layout = Layout(links.tp, pp, links.dp, micro_batch=micro_batch, recompute=recompute,
                    stages=cut)
    config = load_config()
    return block_times(model, load_gpu(gpu_name), config.network, layout, global_batch,
                       gpus_per_node=links.gpus_per_node)


def _explain(doc: dict[str, Any], runs: dict[str, tuple[Any, Any]], *, err: bool) -> None:
    """The fastest schedule drawn, and its critical path block by block."""
    from slurm_arnold.pipeline.render import timeline

    result, used = runs[doc["schedule"]]
    click.echo(f"{doc['schedule']} (makespan {doc['makespan']:g}):\n{timeline(used, result)}",
               err=err)
    click.echo("critical path (each block starts when its reason lets it):", err=err)
    for step in doc["critical_path"]:
        click.echo(f"  {step['start']:>9g} - {step['end']:<9g} stage {step['stage']:>2} "
                   f"{step['block']:<8} after {step['via']}", err=err)


def _print(docs: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    base = next((d["makespan"] for d in docs if d["schedule"] == "1f1b"), None)
    table = Table(title="arnold pipeline")
    for col in ("schedule", "makespan", "bubble rate", "peak memory", "vs 1f1b"):
        table.add_column(col)
    for d in docs:
        table.add_row(d["schedule"], f"{d['makespan']:g}", f"{d['bubble_rate']:.1%}",
                      f"{max(d['peak_memory']):g}",
                      f"{d['makespan'] / base - 1:+.1%}" if base else "-")
    Console(file=sys.stdout, soft_wrap=True).print(table)
    best = min(docs, key=lambda d: (d["makespan"], max(d["peak_memory"])))
    path = best["critical_path"]
    slow = [st for st in path if "slow link" in st["via"]]
    busy = sum(st["end"] - st["start"] for st in path)
    click.echo(f"fastest: {best['schedule']} ({best['makespan']:g} with peak memory "
               f"{max(best['peak_memory']):g}); its critical path runs "
               f"{len(path)} blocks ({busy:g} of compute) and waits on the slow links "
               f"{len(slow)} times ({best['makespan'] - busy:g} not computing)")
