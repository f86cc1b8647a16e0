"""The report as Prometheus metrics, in the text exposition format (``prometheus_client``):
for node_exporter's textfile collector, written by the same run that writes the page."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, generate_latest, write_to_textfile

from slurm_arnold.report.gather import Report


def registry(report: Report) -> CollectorRegistry:
    """Every metric of the report, each with its HELP and TYPE."""
    reg = CollectorRegistry()

    def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
        return Gauge(name, doc, labels, registry=reg)

    nodes = gauge("arnold_nodes", "Nodes by what holds them (arnold job, our reservation, "
                  "another job, free, drained, down).", ("state",))
    for state, count in report.counts().items():
        nodes.labels(state).set(count)
    gauge("arnold_reservations_active", "Our reservations (arnold_<job id>) in Slurm.").set(
        sum(1 for r in report.reservations if r.get("in_slurm")))
    reserved = {n for r in report.reservations for n in r.get("nodes") or []}
    gauge("arnold_reserved_nodes", "Nodes in our reservations.").set(len(reserved))
    gauge("arnold_reserved_idle_nodes", "Nodes in our reservations running nothing now.").set(
        sum(1 for n in reserved if report.nodes.get(n) and report.nodes[n].state == "reserved"))
    gauge("arnold_reserved_idle_node_hours", "Node-hours our current reservations' nodes "
          "have sat idle so far (sampled by reserve sync).").set(
        sum(float(r.get("reserved_idle_node_h") or 0) for r in report.reservations))
    decisions = gauge("arnold_admissions", "Admission decisions recorded for short jobs on "
                      "reserved nodes, by decision.", ("decision",))
    for decision in ("admit", "refuse"):
        decisions.labels(decision).set(report.admissions.get(decision, 0))
    repairs = gauge("arnold_bindings", "Re-placements of waiting or starting jobs recorded "
                    "(moves, repairs, start-time mappings), by kind.", ("kind",))
    for kind, count in sorted(report.repairs.items()):
        repairs.labels(kind).set(count)
    jobs = gauge("arnold_jobs", "Jobs placed by arnold now, by Slurm state.", ("state",))
    for state in ("PENDING", "RUNNING"):
        jobs.labels(state).set(sum(1 for j in report.jobs if j.state == state))
    labels = ("job_id", "user")
    spread = gauge("arnold_job_weighted_spread", "Weighted spread of a running arnold job "
                   "(alpha x max DP spread + (1 - alpha) x max PP spread, minipods).", labels)
    dp = gauge("arnold_job_max_dp_spread", "Largest DP group's minipods, running jobs.", labels)
    pp = gauge("arnold_job_max_pp_spread", "Largest PP group's minipods, running jobs.", labels)
    alone = gauge("arnold_job_slurm_alone_weighted_spread", "What Slurm alone would have given "
                  "the job (modelled at submit), running jobs.", labels)
    solve = gauge("arnold_job_placement_solve_seconds", "Time the job's placement took.",
                  labels)
    for job in report.running:
        key = (str(job.job_id), job.user)
        if job.weighted_spread is not None:
            spread.labels(*key).set(job.weighted_spread)
        if job.max_dp_spread is not None:
            dp.labels(*key).set(job.max_dp_spread)
        if job.max_pp_spread is not None:
            pp.labels(*key).set(job.max_pp_spread)
        if job.slurm_alone and job.slurm_alone.get("weighted_spread") is not None:
            alone.labels(*key).set(job.slurm_alone["weighted_spread"])
        if job.solve_seconds is not None:
            solve.labels(*key).set(job.solve_seconds)
    model = report.predictor.get("model") or {}
    recent = report.predictor.get("recent") or {}
    age = gauge("arnold_predictor_model_age_seconds", "Age of the serving run-time model "
                "(absent: no model).")
    if model.get("age_s") is not None:
        age.set(model["age_s"])
    mae = gauge("arnold_predictor_recent_mae_log", "Mean |log predicted - log actual| run "
                "time of recently finished jobs that had an admission decision.")
    cover = gauge("arnold_predictor_recent_coverage", "Share of those jobs that ended within "
                  "the upper prediction.")
    jobs_measured = gauge("arnold_predictor_recent_jobs",
                          "How many jobs those two are measured on.")
    jobs_measured.set(recent.get("jobs") or 0)
    if recent.get("mae_log") is not None:
        mae.set(recent["mae_log"])
    if recent.get("coverage") is not None:
        cover.set(recent["coverage"])
    gauge("arnold_report_timestamp_seconds", "When this report was made (Unix time).").set(
        report.generated_at)
    return reg


def exposition(report: Report) -> str:
    """The metrics as Prometheus text."""
    return generate_latest(registry(report)).decode()


def write_textfile(report: Report, path: Path) -> None:
    """Write the metrics for node_exporter's textfile collector (atomically, by rename)."""
    write_to_textfile(str(path), registry(report))
