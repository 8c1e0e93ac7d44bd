"""Whole-step validation (perfmodel/validate/steps.py): the MLPerf dataset holds the published figures,
bad rows get one clear error, and the stored results (data/measurements/steps/results.json, written
by `perfmodel validate --kind steps --json`) are what the model computes today: every plan they hold
evaluates to the step they report, and every error is the ratio they show. A model change that moves
a figure fails here until the results are written again (data/measurements/README.md says how)."""

import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from perfmodel.config import ConfigError
from perfmodel.validate import steps as st

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "data" / "measurements" / "steps" / "results.json"


@pytest.fixture(scope="module")
def dataset():
    (ds,) = st.load_step_datasets()
    return ds


@pytest.fixture(scope="module")
def results():
    rep = json.loads(RESULTS.read_text())
    (d,) = rep["steps"]["datasets"]
    return d


def test_the_dataset_holds_the_published_steps(dataset):
    assert dataset.name == "mlperf_dlrm_dcnv2" and len(dataset.rows) == 9
    got = sorted((r.global_batch, r.ms_per_step) for r in dataset.rows)
    assert got == sorted([(55296, 7.150), (135168, 5.051), (55296, 10.354), (28000, 3.702), (32768, 4.361),
                          (49152, 5.849), (55296, 4.733), (55296, 3.536), (135168, 2.354)])
    assert all(r.source.startswith("https://github.com/mlcommons/training_results_v") for r in dataset.rows)
    # what the runs used: fp16 dense compute and all-to-alls (as bf16 runs them), SHARP on Eos's 8 nodes
    assert {r.dense_dtype for r in dataset.rows} == {"bf16"} and all("bf16" in r.precisions for r in dataset.rows)
    assert [r.system for r in dataset.rows if r.in_network] == ["h100ib-64"]
    # HugeCTR's software: MLPs data-parallel (their gradients all-reduced), all-to-alls not chunked
    assert all(r.settings == {"overlap_chunks": 1, "dense": "replicated"} for r in dataset.rows)


HEADER = "system,model,global_batch,dense_dtype,comm_precisions,in_network_reduction,plan_settings,ms_per_step,run,source\n"


@pytest.mark.parametrize("line,field", [
    ("h100ib-8,dlrm-dcnv2-mlperf,55296,fp12,fp32,no,,3.5,r,s", "dense_dtype"),
    ("h100ib-8,dlrm-dcnv2-mlperf,55296.5,fp16,fp32,no,,3.5,r,s", "global_batch"),
    ("h100ib-8,dlrm-dcnv2-mlperf,55296,fp16,fp32,no,,-3.5,r,s", "ms_per_step"),
    ("h100ib-8,dlrm-dcnv2-mlperf,55296,fp16,fp64,no,,3.5,r,s", "comm_precisions"),
    ("h100ib-8,dlrm-dcnv2-mlperf,55296,fp16,fp32,no,chunks=2,3.5,r,s", "plan_settings"),
    ("h100ib-8,dlrm-dcnv2-mlperf,55296,fp16,fp32,no,pipeline=maybe,3.5,r,s", "plan_settings"),
    ("h100ib-8,dlrm-dcnv2-mlperf,55296,fp16,fp32,no,overlap_chunks=0,3.5,r,s", "plan_settings"),
    ("h100ib-8,dlrm-dcnv2-mlperf,55296,fp16,fp32,no,overlap_chunks=1.5,3.5,r,s", "plan_settings"),
    ("h100ib-8,dlrm-dcnv2-mlperf,55296,fp16,fp32,no,grad_buckets=2000,3.5,r,s", "plan_settings"),
    ("h100ib-8,dlrm-dcnv2-mlperf,55296,fp16,fp32,no,dense=sharded,3.5,r,s", "plan_settings"),
    ("h100-64,dlrm-dcnv2-mlperf,55296,fp16,fp32,yes,,3.5,r,s", "in_network_reduction"),
    ("h100ib-8,dlrm-dcnv2-mlperf,55296,fp16,fp32,no,,3.5,r,", "source"),
    ("nope-8,dlrm-dcnv2-mlperf,55296,fp16,fp32,no,,3.5,r,s", "system"),
    ("h100ib-8,dlrm-dcnv2-mlperf,55296,fp16,fp32,no,planner=hugectr:best:7,3.5,r,s", "plan_settings"),
    ("h100ib-8,dlrm-dcnv2-mlperf,55296,fp16,fp32,no,planner=hugectr:auto:x,3.5,r,s", "plan_settings"),
    ("h100ib-8,dlrm-dcnv2-mlperf,55296,fp16,fp32,no,planner=hugectr:auto:7:0.008,3.5,r,s", "plan_source"),
])
def test_a_bad_row_is_one_error_naming_file_line_and_field(tmp_path, line, field):
    (tmp_path / "bad.csv").write_text(HEADER + line + "\n")
    with pytest.raises(ConfigError) as err:
        st.load_step_datasets(tmp_path)
    assert err.value.field == field and err.value.source.endswith("bad.csv:2"), (err.value.source, err.value.field)


def test_plan_settings_parse_as_a_plan_holds_them(tmp_path):
    (tmp_path / "ok.csv").write_text(HEADER + "h100ib-8,dlrm-dcnv2-mlperf,55296,fp16,fp32,no,"
                                     "overlap_chunks=4; pipeline=no; offload=false; dense=replicated,3.5,r,s\n")
    (row,) = st.load_step_datasets(tmp_path)[0].rows
    assert row.settings == {"overlap_chunks": 4, "pipeline": False, "offload": False, "dense": "replicated"}



@pytest.mark.parametrize("settings, key", [("dense=replicated; dense=fully_sharded", "dense"),
                                           ("overlap_chunks=4;pipeline=no;overlap_chunks=2", "overlap_chunks"),
                                           ("planner=hugectr:auto:7; planner=hugectr:uniform", "planner")])
def test_a_setting_given_twice_is_refused(tmp_path, settings, key):
    """The last of two values won, silently: one error naming the file, the row and the key."""
    (tmp_path / "twice.csv").write_text(HEADER + f"h100ib-8,dlrm-dcnv2-mlperf,55296,fp16,fp32,no,{settings},3.5,r,s\n")
    with pytest.raises(ConfigError) as err:
        st.load_step_datasets(tmp_path)
    assert err.value.source.endswith("twice.csv:2") and err.value.field == "plan_settings"
    assert f"sets {key!r} twice" in err.value.message


def test_the_printed_largest_error_is_in_the_means_measure():
    """Two rows 45 % under: the mean, exp(mean |ln(pred / meas)|) - 1, is 82 %, and the max printed
    beside it was |pred / meas - 1|, 45 %: "blind 81.8 % (max 45 %)". The max is now the largest row's
    exp(|ln(pred / meas)|) - 1, never below the mean, and the text says which measure it is."""
    import re

    from perfmodel import validate
    rows = [{"blind_err": -0.45, "run_plan_err": -0.45}, {"blind_err": -0.45, "run_plan_err": 0.1}]
    mean = np.exp(np.mean([abs(np.log(0.55)), abs(np.log(0.55))])) - 1          # 0.818
    run_mean = np.exp(np.mean([abs(np.log(0.55)), abs(np.log(1.1))])) - 1      # 0.414
    rep = {"dataset": "d", "file": "d.csv", "rows": rows, "blind_geomean_err": mean, "blind_max_err": 0.45,
           "run_plan_geomean_err": run_mean, "run_plan_max_err": 0.45}
    text = st.format_steps(rep, rows=False)
    pairs = [(float(a), float(b)) for a, b in re.findall(r"blind ([\d.]+) % \(max (\d+) %\)", text)]
    assert pairs == [(41.4, 82.0), (81.8, 82.0)], text       # the runs' plans, then the best plan
    assert "exp(mean |ln(predicted / measured)|) - 1" in text and "exp(|ln(predicted / measured)|) - 1" in text
    line = validate.summary({"steps": {"datasets": [rep]}})
    assert re.findall(r"largest (\d+) %", line) == ["82", "82"] and "exp(mean |ln" in line
    coll = {"datasets": [{"dataset": "c", "rows": [{**r, "calibrated_err": r["blind_err"], "split": s}
                                                   for r, s in zip(rows, ("held_out", "fit"))],
                          "blind_geomean_err": mean, "blind_max_err": 0.45, "calibrated_geomean_err": mean,
                          "calibrated_max_err": 0.45, "latency_scale": 1.0, "bandwidth_scale": 1.0}]}
    (row,) = [ln for ln in validate.format_report(coll, rows=False).splitlines() if ln.startswith("c ")]
    assert [float(x) for x in re.findall(r"([\d.]+)%", row)] == [81.8, 82.0, 81.8, 82.0], row


@pytest.mark.parametrize("line, message", [
    ("h100ib-8,dlrm-dcnv2-mlperf", "has 2 cells; the header has 10"),
    ("h100ib-8,dlrm-dcnv2-mlperf,55296,fp16,fp32,no,overlap_chunks=4, pipeline=no,3.5,r,s", "has 11 cells; the header has 10"),
    ("h100ib-8,dlrm-dcnv2-mlperf,1e30,fp16,fp32,no,,3.5,r,s", "global_batch': must be a positive finite integer of at most 1e.08"),
])
def test_a_row_of_the_wrong_width_or_a_batch_no_model_takes(tmp_path, line, message):
    """A short row raised AttributeError (csv fills the missing cells with None), an unquoted comma
    moved every later cell a column on silently, and a batch of 1e30 passed, which no model file takes."""
    (tmp_path / "w.csv").write_text(HEADER + line + "\n")
    with pytest.raises(ConfigError, match=message) as err:
        st.load_step_datasets(tmp_path)
    assert err.value.source.endswith("w.csv:2")

def test_a_missing_column_or_non_utf8_file(tmp_path):
    (tmp_path / "a.csv").write_text(HEADER.replace("ms_per_step,", ""))
    with pytest.raises(ConfigError, match="ms_per_step"):
        st.load_step_datasets(tmp_path)
    (tmp_path / "a.csv").write_bytes(HEADER.encode() + b"\xff\xfe\n")
    with pytest.raises(ConfigError, match="UTF-8"):
        st.load_step_datasets(tmp_path)


def test_stored_results_are_what_the_model_computes(dataset, results):
    """Each stored plan, evaluated on its run's system and batch, gives the stored step; the stored
    errors are those steps over the measured ones; the geometric mean is theirs."""
    assert [r["measured_ms"] for r in results["rows"]] == [r.ms_per_step for r in dataset.rows]
    for row, out in zip(dataset.rows, results["rows"]):
        system, model = st.problem(row)
        plan = st.row_plan(out, system, model)
        for key, value in row.settings.items():          # the run's fixed settings are the plan's
            assert getattr(plan, key) == value
        assert st._step_ms(system, model, plan) == pytest.approx(out["blind_ms"], rel=1e-4), row.where
        assert out["blind_err"] == pytest.approx(out["blind_ms"] / out["measured_ms"] - 1.0, rel=1e-9)
    blind = [r["blind_ms"] for r in results["rows"]]
    meas = [r["measured_ms"] for r in results["rows"]]
    assert results["blind_geomean_err"] == pytest.approx(st.geomean(blind, meas), rel=1e-9)
    assert results["blind_max_err"] == pytest.approx(max(abs(b / m - 1) for b, m in zip(blind, meas)), rel=1e-9)


def test_stored_leave_one_system_out_predictions_reproduce(dataset, results):
    """Each system's calibrated plan, evaluated at the parameters fitted without it, gives the
    stored step, no slower than its blind plan there; the fold's parameters were fitted on the other
    systems (one fold per system)."""
    assert set(results["folds"]) == {r.system for r in dataset.rows}
    for row, out in zip(dataset.rows, results["rows"]):
        theta = jnp.asarray([results["folds"][row.system][p] for p in st.PARAMETERS], jnp.float32)
        system, model = st.problem(row)
        system = st.scaled(system, theta)
        plan = st.row_plan({"plan": out["calibrated_plan"]}, system, model)
        assert st._step_ms(system, model, plan) == pytest.approx(out["calibrated_ms"], rel=1e-4), row.where
        # the blind plan is a candidate at the fitted parameters: the calibrated plan is never slower there
        blind = st.row_plan(out, system, model)
        assert out["calibrated_ms"] <= st._step_ms(system, model, blind) * (1 + 1e-4), row.where
        assert out["calibrated_err"] == pytest.approx(out["calibrated_ms"] / out["measured_ms"] - 1.0, rel=1e-9)
    cal = [r["calibrated_ms"] for r in results["rows"]]
    assert results["calibrated_geomean_err"] == pytest.approx(st.geomean(cal, [r["measured_ms"] for r in results["rows"]]),
                                                              rel=1e-9)


def test_shared_parameters_scale_what_they_name(dataset):
    """gemm scales every chip's matmul efficiency (capped at 1), gather the embedding kernels', latency
    every per-step and per-call latency; zero log-scales leave the system as it is."""
    system, _ = st.problem(dataset.rows[0])
    same = st.scaled(system, jnp.zeros(len(st.PARAMETERS)))
    assert float(same.chip.matmul_eff_max) == pytest.approx(float(system.chip.matmul_eff_max))
    up = st.scaled(system, jnp.log(jnp.asarray([1.1, 1.2, 2.0])))
    assert float(up.chip.matmul_eff_max) == pytest.approx(min(1.0, 1.1 * float(system.chip.matmul_eff_max)), rel=1e-6)
    assert float(up.chip.gather_eff_max) == pytest.approx(min(1.0, 1.2 * float(system.chip.gather_eff_max)), rel=1e-6)
    assert float(up.nic.latency_s) == pytest.approx(2.0 * float(system.nic.latency_s), rel=1e-6)
    assert float(up.chip.core_call_s) == pytest.approx(2.0 * float(system.chip.core_call_s), rel=1e-6)
    assert float(up.levels[-1].latency_s) == pytest.approx(2.0 * float(system.levels[-1].latency_s), rel=1e-6)
    assert np.isfinite(float(up.chip.hbm_Bps))


def test_every_run_names_the_planner_its_submission_set(dataset):
    """HugeCTR's planner with the settings of each submission's config_*.sh (data/measurements/README.md)."""
    want = {"a100-8": "hugectr:auto:7:0", "a100roce-64": "hugectr:hier_auto:67:0.0125",
            "h100ib-64": "hugectr:hier_auto:67:0.0125"}
    for r in dataset.rows:
        assert str(r.planner) == want.get(r.system, "hugectr:auto:7:0.008"), r.where
        assert r.plan_source.startswith("https://github.com/mlcommons/training_results_v"), r.where


def test_stored_run_plans_are_the_planners_and_give_the_stored_steps(dataset, results):
    """The run plan each row stores is what the planner and the run's settings give today, and it
    evaluates to the stored step (the physics' figure)."""
    for row, out in zip(dataset.rows, results["rows"]):
        system, model = st.problem(row)
        plan = st.run_plan(system, model, row)
        assert plan.to_dict() == out["run_plan"], row.where
        assert st._step_ms(system, model, plan) == pytest.approx(out["run_plan_ms"], rel=1e-6), row.where
        assert out["run_plan_err"] == pytest.approx(out["run_plan_ms"] / out["measured_ms"] - 1.0, rel=1e-9)
        assert out["claimed_gain"] == pytest.approx(out["run_plan_ms"] / out["best_plan_ms"] - 1.0, rel=1e-9)
    got = [r["run_plan_ms"] for r in results["rows"]]
    assert results["run_plan_geomean_err"] == pytest.approx(st.geomean(got, [r["measured_ms"] for r in results["rows"]]),
                                                            rel=1e-9)


def test_a_row_recomputed_in_a_fresh_process_gives_the_stored_figure(results):
    """Reproducible on any process: the last row's run-plan step from a new interpreter, to 1e-6."""
    import subprocess
    import sys
    code = ("from perfmodel.validate import steps as st; (ds,) = st.load_step_datasets(); r = ds.rows[-1]; "
            "s, m = st.problem(r); print(repr(st._step_ms(s, m, st.run_plan(s, m, r))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert float(out.stdout.strip()) == pytest.approx(results["rows"][-1]["run_plan_ms"], rel=1e-6)


def test_stored_run_plan_folds_reproduce(dataset, results):
    """Leave one system out at the runs' plans: each row's stored step at its fold's parameters."""
    assert set(results["run_plan_folds"]) == {r.system for r in dataset.rows}
    for row, out in zip(dataset.rows, results["rows"]):
        theta = jnp.asarray([results["run_plan_folds"][row.system][p] for p in st.PARAMETERS], jnp.float32)
        system, model = st.problem(row)
        plan = st.row_plan({"plan": out["run_plan"]}, system, model)
        assert st._step_ms(st.scaled(system, theta), model, plan) == pytest.approx(out["run_plan_loso_ms"], rel=1e-4)


def test_stored_generation_folds_reproduce(dataset, results):
    """Leave one generation out at the runs' plans: every chip generation has a fold fitted on the
    others' rows, and each row's stored step at its generation's fold's parameters reproduces."""
    gens = {st.generation(r) for r in dataset.rows}
    assert len(gens) >= 2 and set(results["run_plan_generation_folds"]) == gens
    for row, out in zip(dataset.rows, results["rows"]):
        assert out["generation"] == st.generation(row)
        theta = jnp.asarray([results["run_plan_generation_folds"][out["generation"]][p] for p in st.PARAMETERS], jnp.float32)
        system, model = st.problem(row)
        plan = st.row_plan({"plan": out["run_plan"]}, system, model)
        assert st._step_ms(st.scaled(system, theta), model, plan) == pytest.approx(out["run_plan_logo_ms"], rel=1e-4)
    logo = [r["run_plan_logo_ms"] for r in results["rows"]]
    assert results["run_plan_logo_bias"] == pytest.approx(st.bias(logo, [r["measured_ms"] for r in results["rows"]]))
