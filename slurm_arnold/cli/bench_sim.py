"""``arnold bench sim``: the simulator's comparison on the shared job logs (Slurm's backfill
against Arnold's reservations), its policy variants, held-out slices and job-array runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from benchmarks.logs import LOG_NAMES
from slurm_arnold.cli.options import Finite, docs_option, json_option, quick_option
from slurm_arnold.errors import ArnoldError


@click.command("sim")
@quick_option("3 runs on the first 1,000 jobs of each log")
@click.option("--data", type=click.Path(file_okay=False), default="../shared/data/swf",
              show_default=True, help="Where the shared SWF logs are.")
@click.option("--scale", type=click.IntRange(min=0), default=450_000, show_default=True,
              help="Jobs of the replay-speed run (0: skip it).")
@docs_option
@click.option("--logs", default=",".join(LOG_NAMES), show_default=True,
              help="Which shared logs to replay (each writes its own section).")
@click.option("--horizons", default="",
              help="Instead, sweep the reservation horizon on --logs, e.g. 1,2,4 (hours).")
@click.option("--variants", is_flag=True,
              help="Instead, measure the policy variants (benchmarks.sim.VARIANTS) on --logs.")
@click.option("--variant", "only_variants", multiple=True, metavar="NAME",
              help="With --variants: only this one (repeat for more; the section gets "
                   "'-selected' after its name, so the full table stays).")
@click.option("--load", type=Finite(min=0.1, max=1.0), default=1.0, show_default=True,
              help="With --variants: squeeze the logs' arrivals by this factor (0.9: a "
                   "busier queue).")
@click.option("--held-out", is_flag=True,
              help="Instead, the side-by-side comparison (with --variants: the variants) on "
                   "the jobs right after those the tables replay, as many again (Curie, "
                   "HPC2N: the logs cut short).")
@click.option("--domains", "block_nodes", type=click.IntRange(min=1), default=None,
              help="Instead, cut every leaf into NVLink domains of this many nodes and compare "
                   "arnold (requested predictor) keeping domains whole with arnold without "
                   "the preference, and slurm, on --logs.")
@click.option("--slurm", "on_slurm", is_flag=True,
              help="Run the comparison's or the variants' replays as a Slurm job array on "
                   "this cluster (results gathered into the same tables).")
@click.option("--workdir", type=click.Path(file_okay=False), default=None,
              help="With --slurm: where the tasks read their runs and write results (must "
                   "be readable on the nodes).  [default: a new directory here]")
@click.option("--site-scale", is_flag=True,
              help="Instead, time arnold/model_q/share at a site's size: HPC2N's first "
                   "100,000 jobs on 1,024 nodes x 8 GPUs, and Curie's 10,000 on 5,120.")
@json_option()
def bench_sim(quick: bool, data: str, scale: int, docs: str, logs: str, horizons: str,
              variants: bool, only_variants: tuple[str, ...], load: float, held_out: bool,
              block_nodes: int | None, on_slurm: bool, workdir: str | None, site_scale: bool,
              as_json: bool) -> None:
    """slurm vs arnold with every predictor and mode on the shared logs, and replay speed."""
    from benchmarks.logs import LOGS
    from benchmarks.placement import write_section
    from benchmarks.sim import (
        by_log,
        comparison_specs,
        markdown,
        merge_side_by_side,
        plot,
        rules_text,
        run_one,
        run_specs,
        scale_markdown,
        side_by_side_markdown,
        tiled,
        verdict,
    )
    from predictor.swf import JobRecord, read_swf

    names = [n.strip() for n in logs.split(",") if n.strip()]
    unknown = [n for n in names if n not in LOG_NAMES]
    if unknown:
        raise click.BadParameter(f"unknown log {unknown[0]!r}; use some of "
                                 f"{', '.join(LOG_NAMES)}", param_hint="--logs")
    if only_variants and not variants:
        raise click.UsageError("--variant picks among --variants: add --variants")
    if only_variants:
        from benchmarks.sim import VARIANTS

        stray = [v for v in only_variants if v not in VARIANTS]
        if stray:
            raise click.BadParameter(f"unknown variant {stray[0]!r}; use some of "
                                     f"{', '.join(repr(v) for v in VARIANTS)}",
                                     param_hint="--variant")
    if site_scale:
        from benchmarks.sim import site_scale_markdown, site_scale_runs

        if on_slurm or horizons or variants or held_out or block_nodes is not None:
            raise click.UsageError("--site-scale is a run of its own: drop the other modes")
        timed = site_scale_runs(Path(data), lambda what: click.echo(
            f"arnold: bench sim: {what}", err=True), limit=1000 if quick else None)
        if not timed:
            raise ArnoldError(f"no shared logs in {data}; pass --data DIR")
        if not quick:
            from benchmarks.placement import write_section

            write_section(Path(docs), "sim-site-scale",
                          site_scale_markdown(timed, "arnold bench sim --site-scale"))
        if as_json:
            click.echo(json.dumps(timed))
            return
        for r in timed:
            click.echo(f"{r['log']}: {r['jobs']:,} jobs on {r['nodes']:,} nodes in "
                       f"{r['seconds']} s (target {r['target_s']:g} s)")
        return
    if on_slurm and horizons:
        raise click.UsageError("--slurm runs the comparison or --variants, not --horizons")
    if held_out and (horizons or block_nodes is not None):
        raise click.UsageError("--held-out is a run of its own (or with --variants): drop "
                               "--horizons and --domains")
    if block_nodes is not None:
        from benchmarks.sim import domain_runs, domains_markdown

        if on_slurm or horizons or variants:
            raise click.UsageError("--domains is a run of its own: drop --slurm, --horizons "
                                   "and --variants")
        runs = domain_runs(Path(data), names, block_nodes, "requested",
                           limit=1000 if quick else None,
                           progress=lambda what: click.echo(f"arnold: bench sim: {what}",
                                                            err=True))
        if not runs:
            raise ArnoldError(f"no shared logs in {data}; pass --data DIR")
        if not quick:
            from benchmarks.placement import write_section

            write_section(Path(docs), "sim-domains", domains_markdown(
                runs, f"arnold bench sim --logs {logs} --domains {block_nodes}", block_nodes))
        if as_json:
            click.echo(json.dumps(runs))
            return
        for log, rows in runs.items():
            for row in rows:
                click.echo(f"{log} {row['policy']} keep={row['keep_domains_whole']}: whole "
                           f"domains {row['whole_domains_free_mean']:.2f}, LPJ wait "
                           f"{row['lpj_mean_wait_h']:.2f} h ({row['seconds']} s)")
        return

    def say(what: str) -> None:
        click.echo(f"arnold: bench sim: {what}", err=True)

    def replay(specs: list[Any]) -> dict[str, list[dict[str, Any]]]:
        """The specs' results per log: here, or as a job array with --slurm."""
        return by_log(specs, replay_flat(specs))

    def replay_flat(specs: list[Any]) -> list[dict[str, Any]]:
        """The specs' results in order: here, or as a job array with --slurm."""
        if not on_slurm:
            return run_specs(specs, say)
        import tempfile

        from benchmarks.sim_array import run_array
        from slurm_arnold.slurm import Slurm

        slurm = Slurm()
        slurm.require_config()
        where = Path(workdir) if workdir else Path(tempfile.mkdtemp(
            prefix="arnold-bench-sim-", dir=Path.cwd()))
        return run_array(specs, slurm, where, progress=say)

    if held_out and not variants:
        from benchmarks.sim import held_out_specs

        specs = held_out_specs(Path(data), names, 1000 if quick else None)
        if not specs:
            raise ArnoldError(f"no held-out jobs in {data} for --logs {logs}: only "
                              "Curie and HPC2N are cut short; pass --data DIR or --logs")
        slices: dict[str, list[dict[str, Any]]] = {}
        for spec, row in zip(specs, replay_flat(specs), strict=True):
            slices.setdefault(spec.tag or spec.log, []).append(row)
        if not quick:
            write_section(Path(docs), "sim-held-out", side_by_side_markdown(
                slices, f"arnold bench sim --held-out --logs {logs}",
                title="Simulator: held-out jobs side by side",
                note="The jobs right after the ones the tables above replay, as many again: "
                     "no default was chosen on them. "))
        if as_json:
            click.echo(json.dumps({"held_out": slices}))
            return
        for name, rows in slices.items():
            judged = verdict(rows)
            click.echo(f"{name}: {'missing runs' if judged is None else rules_text(judged)}")
        return

    # A sweep is a run of its own: the comparison table is not redone with it.
    result = {} if horizons or variants else replay(comparison_specs(
        Path(data), quick=quick, limit=1000 if quick else None, logs=names))
    if not result and names and not horizons and not variants:
        raise ArnoldError(f"no shared logs in {data}; pass --data DIR")
    speed = None
    if scale and not quick:
        setup = LOGS[0]
        path = Path(data) / setup.file
        if path.exists():
            records = tiled([r for r in read_swf(path) if isinstance(r, JobRecord)], scale)
            # model_q retrains every simulated day: on ~5,000 days of tiled KTH that alone
            # is over half an hour, so the speed runs use the engine with last2.
            speed = [run_one(records, setup, policy, predictor, "share") | {
                "origin": f"{setup.file} tiled", "jobs": len(records)}
                for policy, predictor in (("slurm", "requested"), ("arnold", "last2"))]
            write_section(Path(docs), "sim-scale", scale_markdown(
                speed, f"arnold bench sim --logs '' --scale {scale}"))
    sweep = None
    if horizons:
        from benchmarks.sim import horizon_markdown, horizon_sweep

        try:
            hours = [float(h) for h in horizons.split(",")]
        except ValueError:
            raise ArnoldError(f"--horizons {horizons!r}: give hours separated by commas, "
                              "e.g. 1,2,4") from None
        sweep = horizon_sweep(Path(data), names, hours,
                              progress=lambda what: click.echo(f"arnold: bench sim: {what}",
                                                               err=True))
        write_section(Path(docs), "sim-horizon", horizon_markdown(
            sweep, f"arnold bench sim --logs {logs} --scale 0 --horizons {horizons}"))
    measured = None
    if variants:
        from benchmarks.sim import variant_specs, variants_markdown, variants_section

        measured = replay(variant_specs(Path(data), names, load, 1000 if quick else None,
                                        held_out=held_out, only=only_variants or None))
        if not measured:
            raise ArnoldError(f"no {'held-out jobs' if held_out else 'shared logs'} in {data} "
                              f"for --logs {logs}; pass --data DIR or --logs")
        if not quick:
            picked = "".join(f" --variant '{v}'" for v in only_variants)
            # Variants are measured against today's default; their tables are history.
            write_section(Path(docs).with_name("sim-variants.md"),
                          variants_section(load, held_out, only_variants),
                          variants_markdown(
                              measured, f"arnold bench sim --logs {logs} --scale 0 --variants "
                              f"--load {load:g}" + (" --held-out" if held_out else "") + picked,
                              load, held_out, only_variants))
    out: dict[str, Any] = {"runs": result, "scale": speed, "horizons": sweep,
                           "variants": measured}
    if not quick and result:
        # Logs replayed by earlier runs keep their rows (a sidecar beside the docs).
        merged = merge_side_by_side(Path(docs).with_name("sim-logs.json"), result)
        write_section(Path(docs), "sim-logs", side_by_side_markdown(
            merged, "arnold bench sim --scale 0 --logs LOG (each log's latest run)"))
    if not quick:
        for name, rows in result.items():
            picture = Path(docs).parent / f"sim-{name}.png"
            plot({name: rows}, picture)
            write_section(Path(docs), f"sim-{name}", markdown(
                {name: rows}, f"arnold bench sim --logs {name} --scale 0", picture.name))
    if as_json:
        click.echo(json.dumps(out))
        return
    for name, rows in result.items():
        for r in rows:
            click.echo(f"{name} {r['policy']}/{r['predictor']}/{r['mode']}: LPJ wait "
                       f"{r['lpj_mean_wait_h']:.2f} h, spread {r['lpj_mean_weighted_spread']:.2f},"
                       f" mean wait {r['mean_wait_h']:.2f} h ({r['seconds']} s)")
