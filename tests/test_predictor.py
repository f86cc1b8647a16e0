"""The predictor's readers, its leakage guard and its evaluation (issue 6, in progress)."""

from __future__ import annotations

import gzip
import json
import math
import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from predictor.features import FEATURES, Vocabulary, compute
from predictor.model import ACI_GAMMA, ACI_MARGIN, AdaptiveCalibrator, aci_margin_needed
from predictor.service import queue_load
from predictor.swf import BadLine, JobRecord, read_swf
from slurm_arnold.cli.main import main
from slurm_arnold.errors import ArnoldError
from slurm_arnold.slurm import JobInfo
from tests.conftest import SHARED

KTH = SHARED / "data" / "swf" / "KTH-SP2-1996-2.swf.gz"


def test_swf_header_unknowns_truncated_and_garbage(tmp_path: Path) -> None:
    path = tmp_path / "log.swf"
    path.write_text(
        "; Version: 2.2\n;  MaxJobs: 3\n"
        "1 0 10 100 4 -1 -1 4 3600 -1 1 7 2 -1 1 -1 -1 -1\n"
        "2 5 -1 -1 -1 -1 -1 8 -1 -1 0 7 2 -1 1 -1 -1 -1\n"
        "3 9 1 2 3\n"
        "4 x 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n")
    items = list(read_swf(path))
    jobs = [i for i in items if isinstance(i, JobRecord)]
    bad = [i for i in items if isinstance(i, BadLine)]
    assert [j.job_id for j in jobs] == ["1", "2"]
    assert (jobs[0].start, jobs[0].end, jobs[0].procs, jobs[0].time_limit) == (10, 110, 4, 3600)
    assert (jobs[1].start, jobs[1].end, jobs[1].procs, jobs[1].time_limit) == (None, None, 8, None)
    assert [(b.line, b.problem) for b in bad] == [(5, "5 fields, SWF has 18"),
                                                  (6, "a field is not a number")]


@pytest.mark.parametrize("value", ["inf", "1e400", "nan", "-inf"])
def test_swf_numbers_that_are_not_finite_are_malformed(tmp_path: Path, value: str) -> None:
    path = tmp_path / "log.swf"
    path.write_text("1 0 10 100 4 -1 -1 4 3600 -1 1 7 2 -1 1 -1 -1 -1\n"
                    f"2 {value} 10 100 4 -1 -1 4 3600 -1 1 7 2 -1 1 -1 -1 -1\n")
    items = list(read_swf(path))
    assert [i.job_id for i in items if isinstance(i, JobRecord)] == ["1"]
    assert [(b.line, b.problem) for b in items if isinstance(b, BadLine)] == [
        (2, "a field is not a number")]


@pytest.mark.parametrize("name, data", [
    ("empty.swf", b""), ("comments.swf", b"; only a header\n"),
    ("garbage.swf", b"\x00\x01\x02 binary\n"), ("fake.swf.gz", b"not gzip at all\n"),
    ("cut.swf.gz", gzip.compress(b"1 0 10 100 4 -1 -1 4 3600")[:20])])
def test_a_log_with_nothing_readable_is_one_error_not_an_empty_result(
        tmp_path: Path, name: str, data: bytes) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(ArnoldError, match=f"^{path}: (no job records|cannot read)"):
        list(read_swf(path))
    result = CliRunner().invoke(main, ["predictor", "evaluate", "--swf", str(path)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("arnold: error: ")


def _jobs(n: int, seed: int = 0) -> list[JobRecord]:
    rng = random.Random(seed)
    out, t = [], 0
    for i in range(n):
        t += rng.randint(1, 600)
        req = rng.choice([600, 3600, 7200])
        run = min(req, int(rng.lognormvariate(6, 1.5)) + 1)
        start = t + rng.randint(0, 300)
        out.append(JobRecord(str(i), f"u{rng.randint(0, 9)}", "g", "p", "q", "n", t, start,
                             start + run, None, None, rng.choice([1, 4, 16]), req, "COMPLETED",
                             0))
    return out


def test_features_never_use_a_job_that_ended_after_the_submit() -> None:
    jobs = _jobs(300)
    vocab = Vocabulary(jobs)
    base, _ = compute(jobs, vocab)
    # Change the runtime of every job that ends after job k's submit: k's features must not move.
    k = 200
    t = jobs[k].submit
    changed = [replace(j, end=j.end + 99_999) if j.end is not None and j.end > t else j
               for j in jobs]
    after, _ = compute(changed, vocab)
    history = [FEATURES.index(f) for f in FEATURES if f.startswith("u_") and f != "u_active"]
    assert np.array_equal(base[k, history], after[k, history], equal_nan=True)
    # ...while the user's last job that ended before it does feed its history (its runtime is
    # changed by moving its start, so it still ends before the submit).
    ended = [i for i in range(k) if jobs[i].user == jobs[k].user and (jobs[i].end or t + 1) <= t]
    last = max(ended, key=lambda i: jobs[i].end or 0)
    moved = [replace(j, start=(j.start or 0) - 777) if i == last else j
             for i, j in enumerate(jobs)]
    shifted, _ = compute(moved, vocab)
    assert not np.array_equal(base[k, history], shifted[k, history], equal_nan=True)


def test_history_features_read_the_users_last_jobs() -> None:
    def job(i: int, submit: int, run: int, req: int, procs: int, state: str) -> JobRecord:
        return JobRecord(str(i), "u1", "g", "p", "q", "n", submit, submit, submit + run, None,
                         None, procs, req, state, None)
    jobs = [job(0, 0, 3600, 3600, 4, "COMPLETED"),   # ran to its limit
            job(1, 3700, 60, 7200, 16, "FAILED"),      # the last to end before job 2's submit
            job(3, 3000, 9000, 3600, 4, "COMPLETED"),  # still running at job 2's submit
            job(2, 4000, 100, 3600, 4, "COMPLETED")]
    matrix, _ = compute(jobs, Vocabulary(jobs))
    row = dict(zip(FEATURES, matrix[3], strict=True))
    assert row["u_last_state"] == 1.0               # failed
    assert row["u_since_end"] == pytest.approx(np.log1p(4000 - 3760))
    assert row["u_same_sig"] == pytest.approx(np.log(3600))  # job 0: same limit and size
    assert row["u_limit_share"] == pytest.approx(0.5)
    assert row["u_last_procs_eq"] == 0.0            # job 1 had 16, job 2 has 4
    assert row["u_med10"] == pytest.approx(np.median([np.log(3600), np.log(60)]))
    # Job 3 has run 1,000 s by then, with the same limit: both running features see it.
    assert row["u_run_elapsed"] == pytest.approx(np.log(1000))
    assert row["u_run_same_elapsed"] == pytest.approx(np.log(1000))
    # Finished with job 2's limit (3,600 s): job 0 only.
    assert row["u_same_req_med"] == pytest.approx(np.log(3600))
    assert row["u_same_req_n"] == pytest.approx(np.log1p(1))
    assert row["u_last_ratio"] == pytest.approx(60 / 7200)  # job 1
    assert row["u_req_change"] == pytest.approx(np.log(3600) - np.log(7200))
    first = dict(zip(FEATURES, matrix[0], strict=True))
    assert all(np.isnan(first[f]) for f in ("u_last_state", "u_since_end", "u_same_sig",
                                            "u_med10", "u_limit_share", "u_last_procs_eq",
                                            "u_run_elapsed", "u_run_same_elapsed",
                                            "u_same_req_med", "u_last_ratio", "u_req_change"))
    assert first["u_same_req_n"] == 0.0
    # Who submitted is not a feature: only what the user's history says.
    assert not {"user", "group"} & set(FEATURES)
    # The live queue gives the same two from squeue's start times.
    queue = [JobInfo(job_id=9, name="x", user="u1", state="RUNNING", partition="p", nodes=(),
                     time_limit_min=60, start_time=3000, end_time=None, reservation=None),
             JobInfo(job_id=10, name="y", user="u1", state="RUNNING", partition="p", nodes=(),
                     time_limit_min=120, start_time=1000, end_time=None, reservation=None)]
    load = queue_load(queue, "u1", time_limit=3600, now=4000)
    assert load["u_run_elapsed"] == pytest.approx(np.log(3000))
    assert load["u_run_same_elapsed"] == pytest.approx(np.log(1000))


def test_evaluate_command_on_a_synthetic_log(tmp_path: Path) -> None:
    path = tmp_path / "log.swf"
    lines = [f"{j.job_id} {j.submit} {(j.start or 0) - j.submit} {(j.end or 0) - (j.start or 0)} "
             f"{j.procs} -1 -1 {j.procs} {j.time_limit} -1 1 {j.user[1:]} 1 -1 1 -1 -1 -1"
             for j in _jobs(400)]
    path.write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(main, ["predictor", "evaluate", "--swf", str(path), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output.strip().splitlines()[-1])
    assert doc["n_train"] + doc["n_test"] == 400
    assert set(doc["methods"]) == {"requested", "last2", "model", "model_q"}
    assert doc["methods"]["requested"]["coverage"] == 1.0  # runs never exceed the request here


CURIE = SHARED / "data" / "swf" / "CEA-Curie-2011-window.swf.gz"


@pytest.mark.parametrize("log", [KTH, CURIE], ids=["kth", "curie"])
def test_model_meets_the_issue_targets_on_the_shared_logs(log: Path) -> None:
    if not log.exists():
        pytest.skip(f"{log} is absent (the shared data is not beside this checkout)")
    result = CliRunner().invoke(main, ["predictor", "evaluate", "--swf", str(log), "--json"])
    assert result.exit_code == 0, result.output
    m = json.loads(result.output.strip().splitlines()[-1])["methods"]
    assert m["model"]["mae_log"] < m["requested"]["mae_log"]
    assert m["model"]["mae_log"] < m["last2"]["mae_log"]
    if m["last2"]["mae_log"] > 1.3:
        assert m["model"]["mae_log"] <= 0.9 * m["last2"]["mae_log"]
    assert m["model_q"]["coverage"] >= 0.88
    assert m["model_q"]["mae_h"] < m["requested"]["mae_h"]


def test_the_calibrators_window_slides_and_skips_uncoverable_jobs() -> None:
    assert AdaptiveCalibrator(0.9).alpha == pytest.approx(0.1 - ACI_MARGIN)  # the default aim
    # A site quantile near 1 keeps a positive aim: the margin takes at most half the misses.
    assert AdaptiveCalibrator(0.999).target == pytest.approx(0.0005)
    calib = AdaptiveCalibrator(0.9, window=100, margin=0.0)
    assert calib.delta == 0.0  # nothing to calibrate on yet
    for _ in range(100):
        calib.add(0.0)
    for _ in range(100):
        calib.add(5.0)
    assert calib.delta == 5.0  # the zeros have left the window
    for score in np.linspace(0.0, 9.9, 100):
        calib.add(float(score))
    assert calib.delta == pytest.approx(8.9)  # the 90th of 100 scores, rounded up
    for _ in range(20):
        calib.add(math.inf)  # outran its request: uncoverable, so the quantile is the cap
    assert calib.delta == math.inf
    aim = 0.1  # the share of misses aimed at (no margin here)
    assert calib.alpha == pytest.approx(aim)
    calib.adapt(False)  # a covered job raises the miss level a little...
    assert calib.alpha == pytest.approx(aim + ACI_GAMMA * aim)
    calib.adapt(True)  # ...a missed one lowers it about nine times as much
    assert calib.alpha == pytest.approx(aim + ACI_GAMMA * aim - ACI_GAMMA * (1 - aim))
    # The window now holds 2.0 .. 9.9 (80 scores) and 20 infinite ones: at level 0.75 the
    # quantile is the 75th score.
    calib.alpha = 0.25
    assert calib.delta == pytest.approx(9.4)


def test_warming_up_moves_the_level_where_the_held_out_jobs_keep_it() -> None:
    # 30% of the held-out jobs outran every cap: covering 90% needs every other job covered,
    # so the level must fall below zero (the delta is then the cap). Filling alone keeps 0.1.
    rng = np.random.default_rng(3)
    scores = np.where(rng.random(3000) < 0.3, math.inf, rng.normal(0.0, 1.0, 3000))
    filled = AdaptiveCalibrator(0.9, window=2000)
    for score in scores:
        filled.add(float(score))
    warmed = AdaptiveCalibrator(0.9, window=2000)
    warmed.warm(scores)
    assert filled.alpha == pytest.approx(0.1 - ACI_MARGIN)
    assert warmed.alpha < 0 and warmed.delta == math.inf
    # All finite and the same distribution throughout: the level stays near the target.
    steady = AdaptiveCalibrator(0.9, window=2000)
    steady.warm(rng.normal(0.0, 1.0, 3000))
    assert abs(steady.alpha - 0.1) < 0.1
    assert len(steady._recent) == 2000  # the window holds the last 2,000 held-out scores


def test_the_adaptive_level_holds_coverage_under_drift_where_a_fixed_one_does_not() -> None:
    # Scores drift upwards (a workload getting longer than the model thinks) and each job's
    # score reaches the window only 300 jobs later (long jobs end late). The tolerance is Gibbs
    # and Candes' bound for adaptive conformal inference, (max(alpha_1, 1 - alpha_1) + gamma) /
    # (gamma T) (their Proposition 4.1, which assumes immediate feedback), plus 300 / T for the
    # jobs whose feedback had not arrived; the fixed level misses by more than that.
    rng = np.random.default_rng(7)
    steps = 20_000
    scores = rng.normal(0.0, 1.0, steps) + np.linspace(0.0, 6.0, steps)
    rates = {}
    for gamma in (0.0, 0.005):
        calib = AdaptiveCalibrator(0.9, gamma=gamma, window=2000)
        missed = np.zeros(steps, dtype=bool)
        for t in range(steps):
            missed[t] = scores[t] > calib.delta
            if t >= 300:
                calib.adapt(bool(missed[t - 300]))
                calib.add(float(scores[t - 300]))
        rates[gamma] = float(np.mean(missed))
    bound = (0.9 + 0.005) / (0.005 * (steps - 300)) + 300 / steps
    assert abs(rates[0.005] - (0.1 - ACI_MARGIN)) <= bound
    assert rates[0.0] - 0.1 > bound


def test_adaptive_deltas_use_nothing_that_ends_after_the_submit() -> None:
    from predictor.evaluate import adaptive_deltas
    from predictor.model import train

    jobs = sorted(_jobs(600), key=lambda j: j.submit)
    cut = 420
    vocab = Vocabulary(jobs[:cut])
    matrix, _ = compute(jobs, vocab)
    actual = np.array([float((j.end or 0) - (j.start or 0)) for j in jobs])
    req = np.array([float(j.time_limit or 0) for j in jobs])
    model = train(matrix[:cut], actual[:cut], vocab, req=req[:cut])
    base = adaptive_deltas(model, jobs, matrix, cut, actual, req)
    k = 100
    t = jobs[cut + k].submit
    # Jobs that end after test job k's submit run far longer: k and earlier keep their deltas.
    late = np.array([(j.end or 0) > t for j in jobs])
    longer = np.where(late, np.minimum(actual * 50, req), actual)
    after = adaptive_deltas(model, jobs, matrix, cut, longer, req)
    assert np.array_equal(base[:k + 1], after[:k + 1])
    assert not np.array_equal(base, after)


def test_the_ablation_prices_the_other_choices() -> None:
    from predictor.evaluate import evaluate

    result = evaluate(_jobs(400), ablation=True)
    methods = result["methods"]
    assert {"model_l2", "model_l2_plain", "model_q_static"} <= set(methods)
    # Different fits, so different errors; the static delta is the served model's own.
    assert methods["model_l2"]["mae_log"] != methods["model"]["mae_log"]
    assert methods["model_l2_plain"]["mae_log"] != methods["model_l2"]["mae_log"]
    assert 0.0 <= methods["model_q_static"]["coverage"] <= 1.0


def test_a_garbage_model_file_is_one_line(tmp_path: Path,
                                          capfd: pytest.CaptureFixture[str]) -> None:
    from predictor.model import ModelError, load

    (tmp_path / "metadata.json").write_text(json.dumps({"features": list(FEATURES)}))
    for name in ("point.txt", "upper.txt"):
        (tmp_path / name).write_bytes(b"garbage\x00\xff")
    with pytest.raises(ModelError, match=r"point\.txt: not a LightGBM model; retrain it"):
        load(tmp_path)
    assert "LightGBM" not in capfd.readouterr().err  # nothing from LightGBM's own logging


def test_evaluate_reports_the_share_no_capped_prediction_can_cover() -> None:
    from predictor.evaluate import evaluate

    # Every 10th job runs 50 s past its request (killed a little late, as schedulers do), a
    # few others 5,000 s (a limit raised by hand): the upper prediction may run 50 s past the
    # request (the 0.9-quantile of the overruns), so only the few are beyond any cap.
    def late(i: int, j: JobRecord) -> JobRecord:
        over = 50 if i % 10 == 0 else 5000 if i % 130 == 5 else None
        return j if over is None else replace(j, end=(j.start or 0) + (j.time_limit or 0) + over)

    jobs = [late(i, j) for i, j in enumerate(_jobs(400))]
    result = evaluate(jobs, keep_predictions=True)
    test = sorted(jobs, key=lambda j: j.submit)[result["n_train"]:]
    over = np.array([(j.end or 0) - (j.start or 0) - (j.time_limit or 0) for j in test])
    assert result["test_outran_request"] == pytest.approx(np.mean(over > 0), abs=1e-4)
    assert 0.05 < result["test_outran_request"] < 0.15
    assert result["upper_grace_s"] == 50
    assert result["test_outran_cap"] == pytest.approx(np.mean(over > 50), abs=1e-4)
    assert 0 < result["test_outran_cap"] < 0.02
    assert result["methods"]["model_q"]["coverage"] <= 1 - result["test_outran_cap"] + 1e-9
    pred = result["predictions"]
    # The upper prediction stops at the request plus the grace; the point one at the request.
    assert np.all(pred["model_q"] <= pred["requested"] + 50 + 1e-6)
    assert np.all(pred["model"] <= pred["requested"] + 1e-6)
    # ...and covers some of the jobs that ran 50 s past their request.
    assert np.any((over == 50) & (pred["model_q"] >= pred["actual"]))


def test_overrun_grace_and_scores() -> None:
    from predictor.model import conformity_scores, overrun_grace

    runtimes = np.array([100.0, 130.0, 90.0, 400.0, 110.0])
    req = np.array([100.0, 100.0, 100.0, 100.0, 0.0])  # the last has no limit
    # Overruns 30 and 300 s; the 0.5-quantile (linear) of those is 165 s.
    assert overrun_grace(runtimes, req, 0.5) == pytest.approx(165.0)
    assert overrun_grace(runtimes[[0, 2]], req[[0, 2]], 0.9) == 0.0
    scores = conformity_scores(np.zeros(5), runtimes, req, grace=30.0)
    assert np.isfinite(scores[[0, 1, 2, 4]]).all() and math.isinf(scores[3])
    assert math.isinf(conformity_scores(np.zeros(5), runtimes, req)[1])


def test_the_margin_keeps_misses_at_most_one_minus_q_over_20000_jobs() -> None:
    # Gibbs and Candes' bound is deterministic: with immediate feedback, over T jobs the share
    # missed is within (max(alpha_1, 1 - alpha_1) + gamma) / (gamma T) of the aim, whatever
    # the scores do. ACI_MARGIN is that bound at T = 20,000, so no sequence of scores, however
    # it drifts, can push the share past 1 - q there (starting at the aim, as a new model
    # does). Three unkind ones:
    rng = np.random.default_rng(11)
    steps = 20_000
    ramps = {"drifting up": rng.normal(0.0, 1.0, steps) + np.linspace(0.0, 8.0, steps),
             "jumping": np.where(np.arange(steps) % 4000 < 2000, 0.0, 5.0)
             + rng.normal(0.0, 0.5, steps),
             "heavy-tailed": rng.standard_cauchy(steps)}
    assert aci_margin_needed(ACI_GAMMA, horizon=steps) <= ACI_MARGIN
    for name, scores in ramps.items():
        calib = AdaptiveCalibrator(0.9, window=2000)
        for score in rng.normal(0.0, 1.0, 2000):  # a window to start from, level at the aim
            calib.add(float(score))
        missed = 0
        for score in scores:
            miss = bool(score > calib.delta)
            missed += miss
            calib.adapt(miss)
            calib.add(float(score))
        assert missed / steps <= 0.1, name


def test_the_point_model_averages_its_seeds_and_saves_every_member(tmp_path: Path) -> None:
    from predictor.model import POINT_SEEDS, ModelError, load, point_files, save, train

    jobs = _jobs(400)
    vocab = Vocabulary(jobs)
    matrix, _ = compute(jobs, vocab)
    runtimes = np.array([(j.end or 0) - (j.start or 0) for j in jobs], dtype=float)
    model = train(matrix, runtimes, vocab, req=[float(j.time_limit or 0) for j in jobs],
                  rounds=30)
    members = [np.asarray(m.predict(matrix)) for m in model.point.members]
    assert len(members) == POINT_SEEDS > 1
    # Bagged with different seeds, the members differ; the model is their mean.
    assert not np.allclose(members[0], members[1])
    assert np.allclose(model.point.predict(matrix), np.mean(members, axis=0))
    # SHAP contributions average too, so each row's still sum to its prediction.
    contrib = model.point.predict(matrix[:5], pred_contrib=True)
    assert np.allclose(contrib.sum(axis=1), model.point.predict(matrix[:5]))

    save(model, tmp_path / "model")
    assert {p.name for p in (tmp_path / "model").iterdir()} >= set(point_files(POINT_SEEDS))
    loaded = load(tmp_path / "model")
    assert np.allclose(loaded.point.predict(matrix), model.point.predict(matrix))

    # A model saved before the ensemble (one point.txt, no point_members) still loads.
    old = tmp_path / "old"
    old.mkdir()
    for name in ("point.txt", "upper.txt"):
        (old / name).write_bytes((tmp_path / "model" / name).read_bytes())
    meta = json.loads((tmp_path / "model" / "metadata.json").read_text())
    del meta["point_members"]
    (old / "metadata.json").write_text(json.dumps(meta))
    single = load(old)
    assert len(single.point.members) == 1
    assert np.allclose(single.point.predict(matrix), members[0])

    # A metadata file whose member count is not a positive integer is one line, not a traceback.
    meta["point_members"] = 0
    (old / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(ModelError, match="point_members must be a positive integer; retrain"):
        load(old)


def test_evaluate_reports_each_boosters_error_beside_the_mean(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import predictor.model
    from predictor.evaluate import evaluate

    jobs = _jobs(400)
    result = evaluate(jobs)
    alone = result["model_members_mae_log"]
    assert len(alone) == predictor.model.POINT_SEEDS
    assert len(set(alone)) > 1  # the seeds land apart
    assert result["methods"]["model"]["mae_log"] not in alone  # the served figure is the mean's
    # The first member alone is the model a single seed (the first) would have served.
    monkeypatch.setattr(predictor.model, "POINT_SEEDS", 1)
    single = evaluate(jobs)
    assert single["model_members_mae_log"] == alone[:1]
    assert single["methods"]["model"]["mae_log"] == pytest.approx(alone[0], abs=1e-12)
