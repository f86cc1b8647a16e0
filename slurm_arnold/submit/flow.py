"""Submitting a placed job: narrow the free nodes, place, write the rank files, run sbatch.

The site-wide submit lock (``slurm_arnold.site_state.site_lock``) is held by every user's
arnold-sbatch around reading the cluster's state, solving and submitting, and released as soon
as sbatch has printed the job id, never while ``--wait`` waits; a placement solved before the
lock is kept where the state read under it is unchanged (``early``). Slurm is the truth for what is
taken: besides busy nodes, the required nodes (``-w``) of every pending job of any user count
as taken, so two submissions, by one user or by several, are never given the same nodes.
"""

from __future__ import annotations

import fcntl
import json
import logging
import math
import os
import re
import secrets
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

import hostlist

from site_config import NetworkTiers, SiteConfig
from slurm_arnold.errors import ArnoldError, InfeasibleError, StateError
from slurm_arnold.placement import NVLINK_GROUPS, JobShape, Parallelism, Placement, place
from slurm_arnold.placement.align import alpha_from_model
from slurm_arnold.placement.engine import ALGOS, check_alpha, place_from_node_list
from slurm_arnold.placement.weights import parse_tier_weights
from slurm_arnold.placement.weights import resolve as resolve_weights
from slurm_arnold.rankorder import ORDERS, write_files
from slurm_arnold.site_state import (
    caller,
    open_site_db,
    open_user_db,
    site_lock,
    site_lock_busy,
    user_subdir,
)
from slurm_arnold.slurm import Slurm
from slurm_arnold.snapshot.live import live_cluster, live_topology, slurm_choice
from slurm_arnold.snapshot.queue import taken_by_queue
from slurm_arnold.snapshot.view import ClusterView, narrow_free
from slurm_arnold.state import StateDB
from slurm_arnold.submit.early import load_solver, solve_early
from slurm_arnold.submit.options import (
    Parsed,
    arnold_options,
    directive_lines,
    effective,
    split_args,
)
from slurm_arnold.submit.spec import JobSpec, write_spec
from slurm_arnold.topology import Topology

log = logging.getLogger(__name__)


@dataclass
class Request:
    """What the user asked for, resolved from the command line, environment and script."""

    parsed: Parsed
    script_text: str | None
    stdin_script: bool
    ours: dict[str, str]
    sbatch: dict[str, str]


def read_request(argv: list[str], stdin: IO[str] | None = None,
                 env: Mapping[str, str] | None = None) -> Request:
    """Split the arguments and read the script (file, stdin, or none for --wrap)."""
    parsed = split_args(argv)
    script_text: str | None = None
    stdin_script = False
    if parsed.script is not None:
        try:
            script_text = Path(parsed.script).read_text(errors="replace")
        except OSError as exc:
            raise ArnoldError(f"{parsed.script}: cannot read the batch script: "
                              f"{exc.strerror}") from None
    elif "wrap" not in parsed.cli:
        script_text = (stdin or sys.stdin).read()
        stdin_script = True
    return Request(parsed, script_text, stdin_script, arnold_options(parsed, script_text),
                   effective(parsed, script_text, env))


def _int_option(value: str | None, name: str) -> int | None:
    if value is None:
        return None
    if not re.fullmatch(r"\d+", value.strip()):
        raise ArnoldError(f"{name}={value!r}: arnold-sbatch needs one whole number here")
    return int(value)


def _nodes_option(value: str | None) -> int | None:
    if value is None:
        return None
    low, _, high = value.partition("-")
    if high and high != low:
        raise ArnoldError(f"--nodes={value}: a placed job needs an exact node count, not a "
                          "range; give -N with one number")
    return _int_option(low, "--nodes")


def _gpus_per_node(sbatch: Mapping[str, str]) -> int | None:
    if "gpus-per-node" in sbatch:
        value = sbatch["gpus-per-node"].split(":")[-1]
        return _int_option(value, "--gpus-per-node")
    for item in sbatch.get("gres", "").split(","):
        match = re.fullmatch(r"(?:gres/)?gpu(?::[\w.-]+)?:(\d+)", item.strip())
        if match:
            return int(match.group(1))
    return None


class NotFreeNow(InfeasibleError):
    """Too few free nodes for the job now (a large job is then planned on reserved nodes)."""

    def __init__(self, job: JobShape, alpha: float, algo: str, message: str,
                 parallelism: Parallelism | None = None) -> None:
        super().__init__(message)
        self.job, self.alpha, self.algo = job, alpha, algo
        self.parallelism = parallelism or Parallelism.of(job)


def explain(target: str, placement: Placement, view: ClusterView, slurm: Slurm,
            default: Path) -> None:
    """``--explain``: our placement beside Slurm's own choice, on stderr (stdout stays
    sbatch's), and the picture (``--explain=PATH``; ``.png`` for PNG, else SVG)."""
    from slurm_arnold.explain import picture, slurm_reference, table

    try:
        theirs = slurm_reference(view, placement.job, placement.alpha, slurm)
    except ArnoldError as exc:
        log.warning("--explain: no Slurm choice to compare with (%s)", exc)
        return
    path = default if target == "1" else Path(target)
    picture(placement, theirs, view, path)
    sys.stderr.write(table(placement, theirs, view.topology) + f"\npicture: {path}\n")


def after_submit(config: SiteConfig, slurm: Slurm, job_id: int, *, queued: bool,
                 gpus: int) -> None:
    """When the submitter is an admin, reserve for a queued large job or decide a queued short
    one's admission at once; otherwise the next ``arnold reserve sync`` does (a user cannot
    make Slurm reservations). A job placed on free nodes, or a short one while we hold no
    reservation, needs neither, and costs nothing here. Never fails the submission."""
    from slurm_arnold.admins import NotAdmin, require_admin

    if not queued:
        return
    try:
        if gpus < config.reservation.large_job_gpus and not any(
                r.name.startswith("arnold_") for r in slurm.reservations()):
            return
    except ArnoldError:
        return
    try:
        require_admin(slurm, "reserve sync")
    except NotAdmin:
        return
    from reservations.reserver import Reserver
    try:
        reserver = Reserver(config, open_site_db(config, write=True), slurm)
        with reserver.lock():
            snap, predictor = reserver.snapshot()
            job = snap.jobs.get(job_id)
            if job is None or job.state != "PENDING":
                return
            if snap.is_lpj(job, config):
                reserver.create(job_id, snap, predictor, force=False)
            elif any(name.startswith("arnold_") for name in snap.reservations):
                reserver.admit(snap, predictor, job, "submit")
        for line in reserver.actions:
            log.info("%s", line)
    except InfeasibleError as exc:  # not yet (not imminent, not paying, nodes spoken for)
        log.info("job %d: %s; `arnold reserve sync` tries again", job_id, exc)
    except ArnoldError as exc:
        log.warning("job %d: %s; `arnold reserve sync` tries again", job_id, exc)


def layout_from_model(request: Request, view: ClusterView, config: SiteConfig) -> dict[str, str]:
    """``--model M --global-batch B [--gpu-type G]`` without ``--tp``/``--pp``: the planner's layout
    for the job's GPUs (``arnold plan``), set as our TP and PP; the rest of the plan goes to the
    job as ``ARNOLD_PLAN_*`` variables (micro-batch, ZeRO stage, recomputation, interleaving,
    CP, EP and the layers per stage)."""
    from slurm_arnold.plan.catalog import load_gpu, load_model
    from slurm_arnold.plan.search import search

    ours, sb = request.ours, request.sbatch
    nodes = _nodes_option(sb.get("nodes"))
    batch = _int_option(ours.get("global-batch"), "--global-batch")
    if nodes is None or batch is None:
        raise ArnoldError("--model needs -N (nodes) and --global-batch to plan the layout")
    g = _gpus_per_node(sb) or view.common_gpus(view.topology.nodes)
    leaf_nodes = max(len(view.topology.nodes_under(leaf)) for leaf in view.topology.leaves())
    model = load_model(ours["model"])
    result = search(model, load_gpu(ours.get("gpu-type", "h100-80g")), config.network, nodes * g,
                    batch, gpus_per_node=g, leaf_nodes=leaf_nodes)
    lay, est = result.layout, result.estimate
    ours["tp"], ours["pp"] = str(lay.tp), str(lay.pp)
    log.info("--model %s: planned TP %d x PP %d x DP %d, micro-batch %d, ZeRO-%d, "
             "recompute %s, interleave %d (%.2f s per step, %.1f GiB per GPU)", model.name,
             lay.tp, lay.pp, lay.dp, lay.micro_batch, lay.zero, lay.recompute,
             lay.interleave, est.step_seconds, est.memory_gib_per_gpu)
    return {"ARNOLD_PLAN_MICRO_BATCH": str(lay.micro_batch), "ARNOLD_PLAN_ZERO": str(lay.zero),
            "ARNOLD_PLAN_RECOMPUTE": lay.recompute,
            "ARNOLD_PLAN_INTERLEAVE": str(lay.interleave),
            # CP and EP ranks come out of the placement's DP dimension (DP here = dp x cp).
            "ARNOLD_PLAN_CP": str(lay.cp), "ARNOLD_PLAN_EP": str(lay.ep),
            "ARNOLD_PLAN_STAGES": ",".join(map(str, lay.stage_layers(model.layers)))}


def plan(request: Request, view: ClusterView, free: set[str], slurm: Slurm,
         network: NetworkTiers | None = None, micro_batch: int = 1,
         site_weights: Mapping[str, float | Sequence[float]] | None = None
         ) -> tuple[Parallelism, Placement, str]:
    """The job's parallelism and placement (of its shape, ``Parallelism.shape``); raises
    ``InfeasibleError`` with the user's choices.
    ``network`` and ``micro_batch`` let ``--align auto`` price a ``--model`` job's traffic;
    ``network``, ``site_weights`` and the user's ``--tier-weight`` weigh the tiers."""
    ours, sb = request.ours, request.sbatch
    tp = _int_option(ours.get("tp"), "--tp")
    pp = _int_option(ours.get("pp"), "--pp")
    if tp is None or pp is None:
        raise ArnoldError("give both --tp and --pp (on the command line or #ARNOLD lines), or "
                          "--model with --global-batch to have them planned")
    # GPUs per node: asked for, or the free nodes' (the partition's when none is free).
    g = _gpus_per_node(sb) or view.common_gpus(free or view.nodes)
    nodes = _nodes_option(sb.get("nodes"))
    dp = _int_option(ours.get("dp"), "--dp")
    if dp is None and nodes is None:
        raise ArnoldError("give -N (nodes) or --dp so the job's size is known")
    par = steer_segments(request_parallelism(ours, tp, pp, dp, nodes, g), view.topology,
                         _int_option(sb.get("segment"), "--segment"), g)
    job = par.shape(g)
    if dp is not None and nodes is not None and nodes != job.nodes:
        raise ArnoldError(f"-N {nodes} but TP x CP x PP x DP = {tp} x {par.cp} x {pp} x {dp} = "
                          f"{job.gpus} GPUs is {job.nodes} nodes of {g} GPUs; drop -N or --dp")
    alpha_text = ours.get("alpha")
    align = ours.get("align")
    if align not in (None, "auto"):
        raise ArnoldError(f"--align {align}: only --align auto is known")
    batch = _int_option(ours.get("global-batch"), "--global-batch")
    if align == "auto" and alpha_text is None and "model" in ours and batch is not None \
            and network is not None:
        # The planner's cost model says how much each kind of traffic weighs.
        alpha = alpha_from_model(ours["model"], batch, tp=tp, pp=pp, dp=par.dp * par.cp,
                                 micro_batch=micro_batch, network=network)
        log.info("--align auto: alpha %.4f from %s's DP and PP traffic", alpha, ours["model"])
    elif align == "auto" and alpha_text is None:
        # Without the model, auto means the paper's finding for dense models:
        # pipelines first (see docs/placement.md).
        alpha = 0.25
    else:
        try:
            alpha = check_alpha(float(alpha_text) if alpha_text is not None else 0.5)
        except ValueError:
            raise ArnoldError(f"--alpha {alpha_text!r} is not a number") from None
    algo = ours.get("placement", "mip")
    if algo not in ALGOS:
        raise ArnoldError(f"--placement {algo}: use one of {', '.join(ALGOS)}")
    # Checked here, so a queued job's spec never keeps weights its binding would refuse.
    weights = resolve_weights(view.topology, alpha, network, site=site_weights,
                              user=user_tier_weights(request))
    if len(free) < job.nodes:
        raise NotFreeNow(job, alpha, algo,
                         f"{job.nodes} nodes needed, {len(free)} free now"
                         f"{' in partition ' + view.partition if view.partition else ''}", par)
    if algo == "slurm":
        # The user's own --segment, else one TP group per segment (NVLink domains only).
        chosen = slurm_choice(slurm, view, job.nodes,
                              segment=_int_option(sb.get("segment"), "--segment")
                              or job.nodes_per_unit)
        return par, place_from_node_list("slurm", chosen, view.topology, job, alpha), algo
    return par, place(view.topology, free, job, algo=algo, alpha=alpha, weights=weights), algo


def user_tier_weights(request: Request) -> dict[str, float | tuple[float, float]]:
    """The job's ``--tier-weight`` (``NAME=W`` or ``NAME=A:B``, several joined by commas)."""
    return parse_tier_weights([request.ours.get("tier-weight", "")])


def steer_segments(par: Parallelism, topology: Topology, segment: int | None,
                   g: int) -> Parallelism:
    """A user's ``--segment S`` on a partition of NVLink domains, mapped onto the job: each
    unit of the placement becomes S nodes, q = S*g / group GPUs NVLink groups of consecutive
    replicas of one stage, or where q does not divide the replicas, of consecutive stages of
    one replica, so every domain gets whole segments. Where S is not a whole number of groups,
    or q divides neither, the placement is left as it is and ``segment_args`` checks it."""
    if not topology.domains or not segment or segment * g <= par.group \
            or (segment * g) % par.group:
        return par
    q = segment * g // par.group
    for steered, onto in ((replace(par, segment_units=q), "replicas of one stage"),
                          (replace(par, segment_stages=q), "stages of one replica")):
        try:
            steered.shape(g)
        except InfeasibleError:
            continue
        log.info("--segment %d: each segment holds %d groups of consecutive %s", segment, q,
                 onto)
        return steered
    return par


def request_parallelism(ours: Mapping[str, str], tp: int, pp: int, dp: int | None,
                        nodes: int | None, g: int) -> Parallelism:
    """The job's ``--cp``, ``--ep`` and ``--nvlink-group`` around TP, PP and DP (DP from the
    nodes when not given)."""
    nvlink = ours.get("nvlink-group", "tp")
    if nvlink not in NVLINK_GROUPS:
        raise ArnoldError(f"--nvlink-group {nvlink}: use one of {', '.join(NVLINK_GROUPS)}")
    cp = _int_option(ours.get("cp"), "--cp")
    ep = _int_option(ours.get("ep"), "--ep")
    cp, ep = 1 if cp is None else cp, 1 if ep is None else ep
    # Zero is a whole number too: refused here, before it divides anything.
    for name, value in (("tp", tp), ("pp", pp), ("dp", dp), ("cp", cp), ("ep", ep)):
        if value is not None and value < 1:
            raise ArnoldError(f"--{name} {value}: must be at least 1")
    if dp is None and nodes is not None and (nodes * g) % (tp * cp * pp):
        raise ArnoldError(f"DP = N x g / (TP x CP x PP) = {nodes} x {g} / ({tp} x {cp} x {pp}) "
                          "is not a whole number; change -N, --tp, --cp or --pp")
    return Parallelism.sized(tp, pp, dp, nodes, g, cp=cp, ep=ep, nvlink=nvlink)


def submit(argv: list[str], config: SiteConfig, *, slurm: Slurm | None = None,
           stdin: IO[str] | None = None, stdout: IO[bytes] | None = None) -> int:
    """Run arnold-sbatch; returns sbatch's exit code (or raises ``ArnoldError``)."""
    slurm = slurm or Slurm()
    out = stdout or sys.stdout.buffer
    request = read_request(argv, stdin)
    if not request.ours:
        return _run_sbatch(argv, request, out, None)
    hetjob = request.parsed.components > 1 or any(
        tokens[:1] in (["hetjob"], ["packjob"])
        for tokens in directive_lines(request.script_text or "", "#SBATCH"))
    if hetjob:
        raise ArnoldError("a heterogeneous job (':' or '#SBATCH hetjob') cannot be placed as "
                          "one TP x PP x DP matrix; drop our options (--tp, --pp, ...) to "
                          "submit it as plain sbatch")
    order = request.ours.get("rank-order", "tp-dp-pp")
    if order not in ORDERS:
        raise ArnoldError(f"--rank-order {order}: use one of {', '.join(ORDERS)}")
    # Numbers are checked before the cluster is read or the site lock taken.
    for name in ("tp", "pp", "dp", "cp", "ep", "global-batch"):
        _int_option(request.ours.get(name), f"--{name}")
    db = open_user_db(config)
    rank_dir = user_subdir(config, "rankorder")
    # Configuration (the partition, its topology, the Slurm backend) is read before the lock:
    # the lock guards the cluster's state, which every other submission waits to read.
    partition = (request.sbatch.get("partition") or config.partition
                 or slurm.default_partition())
    topology = live_topology(slurm, partition, minipod_level=config.minipod_level)
    # A job naming a reservation runs only on its nodes; one naming none, on no reserved node.
    named = request.sbatch.get("reservation") or None
    log.debug("Slurm read through %s", slurm.backend.describe())
    load_solver()
    plans_layout = "model" in request.ours and not {"tp", "pp"} <= set(request.ours)
    early = None
    # Node states are read before the lock: on a site's cluster they are the longest read
    # (seconds for thousands of nodes on a busy slurmctld) and every other submission would
    # wait for it. What the lock guards, that no two submissions are given the same nodes, is
    # kept by the queue read under it (every node a job was given or named since is in it);
    # a node that failed meanwhile is what the admin loop's repair is for.
    nodes = slurm.nodes()
    # Solving early pays where the state will be the same under the lock; while another
    # submission holds the lock it will not be (that one is taking nodes), so then the solve
    # waits for the lock rather than spend a contended core on an answer bound to be dropped.
    if not plans_layout and request.ours.get("placement") != "slurm" \
            and not site_lock_busy(config):
        seen = live_cluster(slurm, minipod_level=config.minipod_level, partition=partition,
                            topology=topology, reservation=named, nodes=nodes)
        seen_free = narrow_free(seen, request.sbatch, taken_by_queue(slurm.jobs(unfinished=True)))
        early = solve_early(seen, seen_free, lambda: plan(
            request, seen, seen_free, slurm, config.network, 1, config.tier_weights))
    asked = time.monotonic()
    with site_lock(config) as lock:
        locked = time.monotonic()
        log.debug("waited %.3f s for the site lock", locked - asked)
        db.abandon_unfinished()
        # Each document once: a busy site's queue takes seconds to read, and every other
        # submission waits for this one.
        reservations = slurm.reservations()
        view = live_cluster(slurm, minipod_level=config.minipod_level, partition=partition,
                            topology=topology, reservation=named, reservations=reservations,
                            nodes=nodes)
        queue = slurm.jobs(unfinished=True)
        planned: dict[str, str] = {}
        if plans_layout:
            planned = layout_from_model(request, view, config)
        free = narrow_free(view, request.sbatch, taken_by_queue(queue))
        try:
            if early is not None and early.holds(view, free):
                log.debug("the cluster is as it was before the site lock: placement solved then")
                par, placement, algo = early.take()
            else:
                par, placement, algo = plan(
                    request, view, free, slurm, config.network,
                    int(planned.get("ARNOLD_PLAN_MICRO_BATCH", "1")), config.tier_weights)
            queued = False
        except NotFreeNow as short:
            if short.algo == "slurm":
                log.info("%s; queued for Slurm to choose (--placement=slurm)", short)
                return _run_sbatch(_plain_argv(request), request, out, None)
            par, algo, queued = short.parallelism, short.algo, True
            from slurm_arnold.snapshot.snapshot import Snapshot
            from slurm_arnold.submit.queued import plan_queued

            placement = plan_queued(config, Snapshot.of(view, queue, reservations), short.job,
                                    short.alpha, request.sbatch)
        job = placement.job
        segment = segment_args(placement, view.topology,
                               _int_option(request.sbatch.get("segment"), "--segment"))
        placement_id = secrets.token_hex(8)
        rankfile, hostfile = write_files(rank_dir, placement, placement_id, order,
                                         parallelism=par)
        log.info("%s %s (%s): DP spread %d, PP spread %d minipods; placement %s",
                 "planned on" if queued else "placed on",
                 hostlist.collect_hostlist(placement.nodes()), algo,
                 placement.metrics.max_dp_spread, placement.metrics.max_pp_spread, placement_id)
        if "explain" in request.ours:
            explain(request.ours["explain"], placement, view, slurm,
                    user_subdir(config, "explain") / f"{placement_id}.svg")
        extra = [f"--nodelist={hostlist.collect_hostlist(placement.nodes())}"]
        if request.sbatch.get("nodes") is None:
            extra.append(f"--nodes={job.nodes}")
        extra += segment
        # ARNOLD_HOSTFILE says SLURM_HOSTFILE is ours: where the job runs on other nodes
        # (requeued, moved) the SPANK plugin points srun at the admin side's host file.
        env = {"ARNOLD_RANKFILE": str(rankfile), "SLURM_HOSTFILE": str(hostfile),
               "ARNOLD_HOSTFILE": str(hostfile), "ARNOLD_PLACEMENT_ID": placement_id,
               **planned}
        if queued:
            # It may be re-placed before it starts (the rank file then comes from the admin
            # side's rankdir): a host file for the old nodes would make srun fail.
            del env["SLURM_HOSTFILE"], env["ARNOLD_HOSTFILE"]
        export = request.parsed.cli.get("export")
        if export and not export.upper().startswith("ALL"):
            extra.append("--export=" + ",".join([export, *(f"{k}={v}" for k, v in env.items())]))
        record = {
            "user": caller(), "status": "submitting", "rankfile": str(rankfile),
            "spec": json.dumps({"tp": par.tp, "pp": par.pp, "dp": par.dp, "cp": par.cp,
                                "ep": par.ep, "nvlink_group": par.nvlink,
                                "segment_units": par.segment_units,
                                "segment_stages": par.segment_stages,
                                "gpus_per_node": job.gpus_per_node, "alpha": placement.alpha,
                                "placement": algo, "rank_order": order, "argv": argv}),
            "placement": json.dumps(placement.as_json() | {
                "nodes": placement.nodes(), "placement_id": placement_id,
                "hostfile": str(hostfile), "gap": placement.gap,
                "slurm_alone": _slurm_alone(view, free if not queued else None, job,
                                            placement.alpha)}),
        }
        record_id = db.record_job(record)
        sbatch_argv = [*request.parsed.sbatch_args, *extra]
        if request.parsed.script is not None:
            sbatch_argv += [request.parsed.script, *request.parsed.script_args]
        code = _run_sbatch(sbatch_argv, request, out, (db, record_id, lock, locked), env,
                           share_lock="wait" not in request.sbatch,
                           status="queued" if queued else "submitted")
    stored = db.job_record(record_id)
    job_id = stored["slurm_job_id"] if stored else None
    if job_id:
        _keep_spec(config, JobSpec(
            int(job_id), caller(), placement_id, par.tp, par.pp, par.dp, job.gpus_per_node,
            placement.alpha, algo, order, request.sbatch.get("partition") or config.partition,
            **{k: request.sbatch.get(k) for k in ("exclude", "nodelist", "constraint")},
            cp=par.cp, ep=par.ep, nvlink=par.nvlink, segment_units=par.segment_units,
            segment_stages=par.segment_stages,
            tier_weights={name: list(w) if isinstance(w, tuple) else [w]
                          for name, w in user_tier_weights(request).items()}))
    if code == 0 and job_id:
        after_submit(config, slurm, int(job_id), queued=queued, gpus=job.gpus)
    return code


def _keep_spec(config: SiteConfig, spec: JobSpec) -> None:
    """Write the job's spec; the job is submitted already, so a file that cannot be written (a
    full disk) is a warning, not a failure the user would answer by submitting again. Without
    it the admin side leaves the job on the nodes it was given."""
    try:
        write_spec(config, spec)
    except StateError as exc:
        log.warning("job %d was submitted, but its spec was not kept (%s); it runs as placed, "
                    "and the admin side will not place it again", spec.job_id, exc)


def segment_args(placement: Placement, topology: Topology, given: int | None) -> list[str]:
    """The ``--segment`` sbatch needs on a partition of NVLink domains (none elsewhere).

    Without one Slurm's block plugin refuses a job no larger than a block that spans two
    blocks ("Requested node configuration is not available", measured on Slurm 26.05); we
    pass the largest size that splits the placement's nodes in every domain (whole TP groups,
    so at least one). A user's own ``given`` size must split them too (Slurm puts each segment
    in one block): ``ArnoldError`` naming the domain and the size that fits if not."""
    if not topology.domains:
        return []
    per_domain = Counter(topology.group_of(node) for node in placement.nodes())
    fitting = math.gcd(*per_domain.values())
    if given is None:
        return [f"--segment={fitting}"]
    for domain, count in per_domain.items():
        if given < 1 or count % given:
            raise ArnoldError(
                f"--segment {given}: the placement puts {count} nodes in NVLink domain "
                f"{domain}, not a whole number of {given}-node segments; drop --segment "
                f"(arnold-sbatch then passes --segment={fitting}, which fits)")
    return []


def _slurm_alone(view: ClusterView, free: set[str] | None, job: JobShape,
                 alpha: float) -> dict[str, Any] | None:
    """What Slurm alone would have given the job on the same free nodes (topology/tree's rule,
    modelled: no slurmctld round trip inside the lock), kept so the admins' page shows it
    beside ours without placing anything again; None for a job queued for busy nodes."""
    if free is None:
        return None
    from slurm_arnold.explain import slurm_reference

    try:
        theirs = slurm_reference(replace(view, free=set(free)), job, alpha, None)
    except ArnoldError:
        return None
    return theirs.metrics.as_dict() | {"nodes": theirs.nodes()}


def _plain_argv(request: Request) -> list[str]:
    """sbatch's arguments without ours."""
    argv = list(request.parsed.sbatch_args)
    if request.parsed.script is not None:
        argv += [request.parsed.script, *request.parsed.script_args]
    return argv


def _run_sbatch(argv: list[str], request: Request, out: IO[bytes],
                record: tuple[StateDB, int, Any, float] | None,
                extra_env: Mapping[str, str] | None = None, *, share_lock: bool = False,
                status: str = "submitted") -> int:
    """Run sbatch with our stdout relayed byte for byte; record the job id as soon as sbatch
    prints it, then release the lock (so ``--wait`` never holds it). With ``share_lock`` sbatch
    inherits the lock's descriptor: if we are killed while it submits, the lock stays held
    until sbatch is done, so nobody plans on the nodes it is about to take."""
    env = dict(os.environ) | dict(extra_env or {})
    log.debug("running: sbatch %s", " ".join(argv))
    fds = (record[2],) if record is not None and share_lock else ()
    try:
        proc = subprocess.Popen(["sbatch", *argv], stdin=subprocess.PIPE if request.stdin_script
                                else None, stdout=subprocess.PIPE, env=env, pass_fds=fds)
    except FileNotFoundError:
        raise ArnoldError("`sbatch` not found; install Slurm's client commands "
                          "(Debian: slurm-client) or put them on PATH") from None
    if request.stdin_script:
        assert proc.stdin is not None
        proc.stdin.write((request.script_text or "").encode())
        proc.stdin.close()
    assert proc.stdout is not None
    first = proc.stdout.readline()
    out.write(first)
    out.flush()
    if record is not None:
        db, record_id, lock, locked = record
        match = re.search(rb"(\d+)", first)
        try:
            db.update_job(record_id, {"slurm_job_id": int(match.group(1)) if match else None,
                                      "status": status if match else "sbatch-failed"})
        except StateError as exc:
            # sbatch has spoken: the job is Slurm's now, placed and with its rank file. Losing
            # its record (a full disk) must not lose the job nor sbatch's output.
            log.warning("%s; the job was %s all the same", exc,
                        f"submitted ({match.group(1).decode()})" if match else "not submitted")
        fcntl.flock(lock, fcntl.LOCK_UN)
        # `arnold bench sbatch` reads this line: what every other submission waits behind.
        log.debug("released the site lock after holding it %.3f s", time.monotonic() - locked)
    stream = proc.stdout
    while chunk := os.read(stream.fileno(), 65536):
        out.write(chunk)
        out.flush()
    return proc.wait()
