"""``arnold bench``: the benchmark commands; each full run writes its section of
docs/benchmarks.md, and ``--quick`` is the smoke run the tests use."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console

from slurm_arnold.cli.bench_sim import bench_sim
from slurm_arnold.cli.bench_site import bench_site
from slurm_arnold.cli.options import (
    Finite,
    against_option,
    backends_option,
    docs_option,
    json_option,
    quick_option,
)
from slurm_arnold.errors import ArnoldError


@click.group("bench")
def bench() -> None:
    """Benchmarks; each writes its section of docs/benchmarks.md."""


bench.add_command(bench_sim)
bench.add_command(bench_site)


@bench.command("placement")
@quick_option("a few small cases")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Shift the suite to other clusters.")
@click.option("--live", is_flag=True,
              help="Instead, a sequence of jobs on the live cluster: ours against Slurm's own "
                   "choice and task order, job by job (needs the cluster idle).")
@click.option("--nvl", is_flag=True,
              help="Instead, NVL72-style clusters (racks of 18 x 4 GPUs as NVLink domains, "
                   "three scale-out tiers): ours against Slurm's block rule and the baselines.")
@docs_option
@json_option()
def bench_placement(quick: bool, seed: int, live: bool, nvl: bool, docs: str,
                    as_json: bool) -> None:
    """Every placement algorithm side by side on fragmented clusters at three scales."""
    from rich.progress import Progress

    if nvl:
        from benchmarks.placement import write_section
        from benchmarks.placement_nvl import markdown as nvl_markdown
        from benchmarks.placement_nvl import run as nvl_run

        measured = nvl_run(quick=quick, seed=seed)
        if not quick:
            write_section(Path(docs), "placement-nvl", nvl_markdown(
                measured, "arnold bench placement --nvl" + (f" --seed {seed}" if seed else "")))
        if as_json:
            click.echo(json.dumps(measured))
            return
        for scale, s in measured["summary"].items():
            click.echo(f"{scale} GPUs: {s['cases']} cases, wall p95 {s['wall_p95_s']} s, ours "
                       f"/ block rule {s['ratio_to_block_rule_mean']}, TP groups split "
                       f"{s['ours_split_groups']}")
        r = measured["random_summary"]
        click.echo(f"random trees: nowhere worse than every rival in {r['nowhere_worse']} of "
                   f"{r['cases']} ({r['nowhere_worse_without_new_steps']} without the MIP "
                   f"inside a rival's region, stage packing and the tier model; proven "
                   f"impossible in "
                   f"{r['tier_model_proven_impossible']}), wall p95 {r['wall_p95_s']} s")
        return

    if live:
        from benchmarks.placement import write_section
        from benchmarks.placement_live import markdown as live_markdown
        from benchmarks.placement_live import run as live_run

        measured = live_run(2 if quick else 6, seed=seed or 11,
                            progress=lambda what: click.echo(f"arnold: bench placement: {what}",
                                                             err=True))
        if not quick:
            write_section(Path(docs), f"placement-live-{measured['slurm_version']}",
                          live_markdown(measured, "arnold bench placement --live"
                                        + (f" --seed {seed}" if seed else "")))
        if as_json:
            click.echo(json.dumps(measured))
            return
        click.echo(f"Slurm {measured['slurm_version']}: {len(measured['jobs'])} jobs, mean "
                   f"ratio ours/Slurm's weighted spread {measured['ratio_mean']}; ours never "
                   f"worse: {measured['ours_never_worse']}")
        return

    from benchmarks.placement import FULL, QUICK, case_count, markdown, run_suite, write_section

    spec = QUICK if quick else FULL
    total = case_count(spec)
    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("placement cases", total=total)
        result = run_suite(spec, seed, progress=lambda: bar.advance(task))
    if not quick:
        command = "arnold bench placement" + (f" --seed {seed}" if seed else "")
        write_section(Path(docs), "placement", markdown(result, command))
    if as_json:
        click.echo(json.dumps(result))
        return
    s = result["summary"]
    click.echo(f"{s['cases']} cases: ratio best-baseline/mip mean {s['ratio_mean']}, max "
               f"{s['ratio_max']}; never worse than best baseline: "
               f"{s['never_worse_than_best_baseline']}, than pp-aligned: "
               f"{s['never_worse_than_pp_aligned']}")
    for scale, v in s["per_scale"].items():
        budgets = ", ".join(f"{k}: vs best {b['spread_vs_best_mean']}, proven {b['proven']}"
                            for k, b in v["budgets"].items())
        click.echo(f"  {scale}: wall p95 {v['wall_p95_s']} s, gap max {v['gap_max']}, "
                   f"gap<=1% {v['proven_or_gap_1pct']}/{v['cases']}; {budgets}")


@bench.command("predictor")
@quick_option("a small history")
@click.option("--size", type=click.IntRange(min=1000), default=450_000, show_default=True,
              help="Jobs in the history.")
@click.option("--data", type=click.Path(file_okay=False), default="../shared/data/swf",
              show_default=True, help="Where the shared SWF logs are.")
@docs_option
@json_option()
def bench_predictor(quick: bool, size: int, data: str, docs: str, as_json: bool) -> None:
    """Training time on a large history and prediction latency."""
    from benchmarks.placement import write_section
    from benchmarks.predictor import accuracy, accuracy_markdown, markdown, run

    result = run(5000 if quick else size, Path(data), probes=20 if quick else 200)
    if not quick:
        command = "arnold bench predictor" + (f" --size {size}" if size != 450_000 else "")
        result["accuracy"] = accuracy(Path(data))
        write_section(Path(docs), "predictor-accuracy",
                      accuracy_markdown(result["accuracy"], command))
        write_section(Path(docs), "predictor", markdown(result, command))
    if as_json:
        click.echo(json.dumps(result))
        return
    click.echo(f"{result['jobs']} jobs ({result['origin']}): features + training "
               f"{result['train_total_s']} s; one prediction p95 {result['single_ms_p95']} ms; "
               f"predict path p95 {result['predict_path_ms_p95']} ms")


@bench.command("report")
@quick_option("the 64-node page only")
@docs_option
@json_option()
def bench_report(quick: bool, docs: str, as_json: bool) -> None:
    """The admins' page's size and render time in headless Chromium, 64 and 12,500 nodes."""
    from benchmarks.placement import write_section
    from benchmarks.report import markdown as report_markdown
    from benchmarks.report import run as report_run

    result = report_run(quick, shots=None if quick else Path(docs).parent)
    if not quick:
        write_section(Path(docs), "report", report_markdown(result, "arnold bench report"))
    if as_json:
        click.echo(json.dumps(result))
        return
    for r in result["pages"]:
        click.echo(f"{r['nodes']} nodes: {r['bytes']} bytes, render {r['render_ms']} ms")


@bench.command("fidelity")
@quick_option("20 jobs")
@click.option("--jobs", "n_jobs", type=click.IntRange(min=2), default=100, show_default=True,
              help="Jobs of the KTH slice.")
@click.option("--first", type=click.IntRange(min=0), default=10_000, show_default=True,
              help="Index of the slice's first job.")
@click.option("--scale", type=Finite(min=1), default=300.0, show_default=True,
              help="Divide the log's times by this.")
@click.option("--data", type=click.Path(file_okay=False), default="../shared/data/swf",
              show_default=True, help="Where the shared SWF logs are.")
@docs_option
@json_option()
def bench_fidelity(quick: bool, n_jobs: int, first: int, scale: float, data: str, docs: str,
                   as_json: bool) -> None:
    """A small log on the live cluster (arnold-sbatch + reserve sync) and in the simulator:
    how closely start order and waits agree (admin: it runs `arnold reserve sync`)."""
    from benchmarks.fidelity import FidelitySetup, markdown, run
    from benchmarks.logs import LOGS
    from benchmarks.placement import write_section

    log = Path(data) / LOGS[0].file
    if not log.exists():
        raise ArnoldError(f"no KTH log at {log}; pass --data DIR")
    setup = FidelitySetup(log, first=first, jobs=20 if quick else n_jobs, scale=scale)
    result = run(setup, progress=lambda what: click.echo(f"arnold: bench fidelity: {what}",
                                                         err=True))
    if not quick:
        write_section(Path(docs), "fidelity", markdown(
            result, f"arnold bench fidelity --jobs {n_jobs} --first {first} --scale {scale:g}"))
    if as_json:
        click.echo(json.dumps(result))
        return
    click.echo(f"{result['jobs']} jobs: same start order for {result['same_order_fraction']:.0%}"
               f", pairs {result['pair_agreement']:.1%}; mean wait live "
               f"{result['live_mean_wait_s']} s, sim {result['sim_mean_wait_s']} s")


@bench.command("sbatch")
@quick_option("2 pairs, 2 users x 2")
@click.option("--runs", type=click.IntRange(min=1), default=9, show_default=True,
              help="Rounds of submissions (sbatch, then arnold-sbatch per backend).")
@click.option("--multi-user/--no-multi-user", default=True, show_default=True,
              help="Also 3 users x 5 concurrent submissions through the site install "
                   "(root: makes the users).")
@click.option("--bursts", type=click.IntRange(min=1), default=5, show_default=True,
              help="How many times the multi-user burst is repeated (quick: 1).")
@backends_option
@against_option
@docs_option
@json_option()
def bench_sbatch(quick: bool, runs: int, multi_user: bool, bursts: int,
                 backends: tuple[str, ...] | None, against: str | None, docs: str,
                 as_json: bool) -> None:
    """Median wall time of arnold-sbatch vs plain sbatch for a 16-node job, its time inside
    the site lock, and the latency of many users submitting at once (live cluster), for each
    Slurm backend side by side."""
    from benchmarks import multiuser
    from benchmarks.backends import available
    from benchmarks.overhead import markdown, run

    chosen = available(backends)
    result = run(2 if quick else runs,
                 progress=lambda what: click.echo(f"arnold: bench sbatch: {what}", err=True),
                 against=Path(against) if against else None, backends=chosen)
    if multi_user:
        users = multiuser.USERS[:2] if quick else multiuser.USERS
        by_backend = {b: multiuser.bench(per_user=2 if quick else 5, users=users,
                                         rounds=1 if quick else bursts,
                                         env={"ARNOLD_SLURM__BACKEND": b}) for b in chosen}
        result["multi_user"] = by_backend[chosen[0]]
        for b, m in by_backend.items():
            result["backends"][b]["multi_user"] = m
        if against:  # the same bursts through the other install, in the same run
            result["against"]["multi_user"] = multiuser.bench(
                per_user=2 if quick else 5, users=users, rounds=1 if quick else bursts,
                venv=Path(against))
    command = (f"arnold bench sbatch --runs {runs} --bursts {bursts}"
               + (" --against VENV" if against else ""))
    _write_docs(quick, docs, "sbatch-overhead", markdown(result, command))
    if as_json:
        click.echo(json.dumps(result))
        return
    click.echo(f"sbatch {result['sbatch_median_s']} s, arnold-sbatch "
               f"{result['arnold_sbatch_median_s']} s: overhead {result['overhead_median_s']} s")
    for name, b in result["backends"].items():
        line = (f"  {name}: arnold-sbatch {b['arnold_sbatch_median_s']} s, in the site lock "
                f"{b['lock_median_s']} s")
        if "multi_user" in b:
            m = b["multi_user"]
            line += (f"; {m['rounds']} x {m['users']} users x {m['per_user']} at once: p50 "
                     f"{m['p50_s']} s, p95 {m['p95_s']} s, worst burst p95 "
                     f"{m['worst_burst_p95_s']} s; {len(m['shared_node_pairs'])} pairs "
                     f"sharing nodes, {m['failed']} failed")
        click.echo(line)


@bench.command("sync")
@quick_option("100 queued jobs, one round, one more pass")
@click.option("--queue", type=click.IntRange(min=1), default=2000, show_default=True,
              help="One-node jobs waiting in the queue.")
@click.option("--rounds", type=click.IntRange(min=1), default=3, show_default=True,
              help="Rounds (each backend in turn in each).")
@click.option("--passes", type=click.IntRange(min=1), default=3, show_default=True,
              help="Passes after the first in each round.")
@backends_option
@docs_option
@json_option()
def bench_sync(quick: bool, queue: int, rounds: int, passes: int,
               backends: tuple[str, ...] | None, docs: str, as_json: bool) -> None:
    """One `arnold reserve sync` pass with a deep queue (the first, which reserves, and the
    next ones), for each Slurm backend side by side (live cluster; root)."""
    from benchmarks.sync import markdown, run

    if quick:
        queue, rounds, passes = 100, 1, 1
    result = run(queue, rounds, passes, backends,
                 progress=lambda what: click.echo(f"arnold: bench sync: {what}", err=True))
    _write_docs(quick, docs, "sync-backends", markdown(
        result, f"arnold bench sync --queue {queue} --rounds {rounds} --passes {passes}"))
    if as_json:
        click.echo(json.dumps(result))
        return
    for name, b in result["backends"].items():
        click.echo(f"{name}: first pass {b['first_pass_median_s']} s "
                   f"({b['first_pass_actions']} actions), next passes "
                   f"{b['next_pass_median_s']} s (p95 {b['next_pass_p95_s']} s), every job "
                   f"read in {b['jobs_read_median_s']} s")
    if "ratio_first" in result:
        click.echo(f"pyslurm over commands: first x{result['ratio_first']}, next "
                   f"x{result['ratio_next']}")


def _write_docs(quick: bool, docs: str, section: str, text: str) -> None:
    """A full run's section of the docs (a smoke run writes none)."""
    from benchmarks.placement import write_section

    if not quick:
        write_section(Path(docs), section, text)


@bench.command("queue")
@quick_option("4 jobs, a lighter load")
@click.option("--jobs", "n_jobs", type=click.IntRange(min=2), default=24, show_default=True,
              help="Jobs of the sequence.")
@click.option("--period", type=Finite(min=1), default=5.0, show_default=True,
              help="Seconds between `arnold reserve sync` passes during the arnold run.")
@click.option("--seed", type=int, default=7, show_default=True, help="The sequence's seed.")
@docs_option
@json_option()
def bench_queue(quick: bool, n_jobs: int, period: float, seed: int, docs: str,
                as_json: bool) -> None:
    """A busy cluster's job sequence through arnold-sbatch vs plain sbatch (live; admin: it
    runs `arnold reserve sync` and drains a node): refusals, spreads, waits, repair time."""
    from benchmarks.placement import write_section
    from benchmarks.queue import BACKGROUND, QUICK_BACKGROUND, markdown, run

    result = run(4 if quick else n_jobs, period, seed,
                 progress=lambda what: click.echo(f"arnold: bench queue: {what}", err=True),
                 background=QUICK_BACKGROUND if quick else BACKGROUND)
    if not quick:
        write_section(Path(docs), "queue", markdown(
            result, f"arnold bench queue --jobs {n_jobs} --period {period:g} --seed {seed}"))
    if as_json:
        click.echo(json.dumps(result))
        return
    click.echo(f"{result['jobs']} jobs, {result['refused']} refused; weighted spread "
               f"{result['arnold_mean_weighted_spread']} vs Slurm's "
               f"{result['slurm_mean_weighted_spread']} (x{result['spread_ratio']}); mean wait "
               f"{result['arnold_mean_wait_s']} s vs {result['slurm_mean_wait_s']} s "
               f"(x{result['wait_ratio']}); repair {result['repair_latency_s']} s")


@bench.command("mapping")
@quick_option("6 allocations, 256 nodes")
@click.option("--live/--no-live", default=True, show_default=True,
              help="Also time the local cluster's PrologSlurmctld (needs the cluster).")
@against_option
@docs_option
@json_option()
def bench_mapping(quick: bool, live: bool, against: str | None, docs: str,
                  as_json: bool) -> None:
    """Ranks at job start: arnold-prolog's mapping vs Slurm's task order on random allocations
    of fragmented clusters, its time at 1,024 nodes, and the prolog's time live."""
    from benchmarks.mapping import markdown, run
    from benchmarks.placement import write_section

    if against and not live:
        raise click.UsageError("--against compares the live prolog: drop --no-live")
    result = run(quick, live,
                 progress=lambda what: click.echo(f"arnold: bench mapping: {what}", err=True),
                 against=Path(against) if against else None)
    if not quick:
        write_section(Path(docs), "mapping", markdown(
            result, "arnold bench mapping" + ("" if live else " --no-live")
            + (" --against VENV" if against else "")))
    if as_json:
        click.echo(json.dumps(result))
        return
    s, at = result["summary"], result["at_scale"]
    click.echo(f"{s['allocations']} allocations: worse than Slurm's order in DP {s['worse_dp']}"
               f", in PP {s['worse_pp']}; weighted spread {s['ours_mean_weighted']} vs "
               f"{s['slurm_mean_weighted']} (x{s['ratio']}); {at['nodes']} nodes mapped in "
               f"{at['median_s']} s")
    if "live" in result:
        lv = result["live"]
        click.echo(f"PrologSlurmctld: mapping {lv['mapped_median_s']} s, nothing asked "
                   f"{lv['nothing_asked_median_s']} s")


@bench.command("plan")
@quick_option("two search-time cases")
@click.option("--reference", type=click.Path(dir_okay=False),
              default="../shared/data/reference/megatron-sc21-table1.csv", show_default=True,
              help="Megatron-LM's Table 1 as CSV.")
@click.option("--nest-dir", type=click.Path(file_okay=False),
              default="../shared/data/reference/nest", show_default=True,
              help="NEST instances (NAME.json) with NEST's results (NAME.nest-result.json).")
@docs_option
@json_option()
def bench_plan(quick: bool, reference: str, nest_dir: str, docs: str, as_json: bool) -> None:
    """The planner's cost model against Megatron-LM's Table 1, its search time, and its search
    on NEST's own instances against NEST's."""
    from benchmarks.placement import write_section
    from benchmarks.plan import (
        flash_runs,
        korthikanti_runs,
        llama_405b,
        markdown,
        mosaic_h100,
        nest_instances,
        speed,
        table1,
    )

    if not Path(reference).exists():
        raise ArnoldError(f"no reference table at {reference}; pass --reference FILE")
    rows = table1(Path(reference))
    speeds = speed(quick)
    llama = llama_405b()
    flash = flash_runs()
    mosaic = mosaic_h100()
    korthikanti = korthikanti_runs()
    nest = nest_instances(Path(nest_dir)) if Path(nest_dir).is_dir() else []
    if not quick:
        write_section(Path(docs), "plan", markdown(rows, speeds, "arnold bench plan", llama,
                                                   nest, flash, mosaic, korthikanti))
    if as_json:
        click.echo(json.dumps({"table1": rows, "speed": speeds, "llama3_405b": llama,
                               "nest": nest, "flash_runs": flash, "mosaic_h100": mosaic,
                               "korthikanti": korthikanti}))
        return
    for r in rows:
        click.echo(f"{r['model']}: published {r['published_tflops']:.0f}, predicted "
                   f"{r['predicted_tflops']:.1f} ({r['error']:+.1%}); planner "
                   f"{r['planned_layout']} {r['planned_tflops']:.1f}")
    for f in flash:
        click.echo(f"{f['model']} (FlashAttention): published {f['published_tokens_per_s']:,.0f}"
                   f" tokens/s, predicted {f['predicted_tokens_per_s']:,.0f} ({f['error']:+.1%})")
    for k in korthikanti:
        click.echo(f"{k['model']} on {k['gpus']} GPUs (Megatron-LM 2022, SP + selective): "
                   f"published {k['published_present_s']:.2f} s, predicted "
                   f"{k['predicted_present_s']:.2f} s ({k['present_error']:+.1%})")
    for sp in speeds:
        click.echo(f"search {sp['model']} on {sp['gpus']} GPUs: {sp['seconds']:.3f} s")
    for nr in nest:
        click.echo(f"NEST {nr['instance']}: ours {nr['ours']['finalTimePerBatch']:,.1f} in "
                   f"{nr['ours']['search_seconds']:.4f} s, NEST's "
                   f"{nr['nest']['finalTimePerBatch']:,.1f}")



@bench.command("pipeline")
@quick_option("small instances")
@click.option("--time-limit", type=Finite(min=0.1), default=60.0, show_default=True,
              help="Seconds per exact solve.")
@docs_option
@json_option()
def bench_pipeline(quick: bool, time_limit: float, docs: str, as_json: bool) -> None:
    """CrossPipe's targets (delay-aware vs 1F1B and ZB-H1), the greedy against the exact
    schedule, and the time to generate and simulate at p = 32, m = 256."""
    from benchmarks.pipeline import chunk_shapes, greedy_vs_exact, markdown, speed, targets
    from benchmarks.placement import write_section

    t = targets(quick, time_limit)
    g = greedy_vs_exact(quick, time_limit)
    c = chunk_shapes(quick)
    s = speed(quick)
    if not quick:
        write_section(Path(docs), "pipeline", markdown(t, g, s, "arnold bench pipeline", c))
    if as_json:
        click.echo(json.dumps({"targets": t, "greedy_vs_exact": g, "chunks": c, "speed": s}))
        return
    for r in t:
        click.echo(f"p {r['p']} m {r['m']} delays ({r['latency']:g}, {r['bandwidth_time']:g}):"
                   f" cut vs 1f1b {r['cut_vs_1f1b']:.1%}, vs zbh1 {r['cut_vs_zbh1']:.1%}"
                   f" ({'met' if r['met'] else 'not met'})")
    click.echo(f"greedy / optimal worst x{max(r['ratio'] for r in g):.3f} over {len(g)}")
    for r in s:
        click.echo(f"{r['schedule']} p {r['p']} m {r['m']}: {r['seconds']:.3f} s")
