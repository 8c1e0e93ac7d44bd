"""Answers with error bars (perfmodel/uncertainty): the inputs' ranges as the loaders read and check
them, their propagation, the model's own error and the calibration of the intervals it gives."""

import json
import math

import numpy as np
import pytest

import perfmodel as pm
from perfmodel.cli import main
from perfmodel.config import DATA_DIR, ConfigError
from perfmodel.hardware import System
from perfmodel.plan import to_arrays
from perfmodel.uncertainty import modelerror as ME
from perfmodel.uncertainty import propagate as P
from perfmodel.uncertainty.decompose import MODEL_ERROR_NAME, sources
from perfmodel.uncertainty.inputs import DEFAULT_SPREAD, inputs_of
from perfmodel.uncertainty.report import ratio

pytestmark = pytest.mark.xdist_group("uncertainty")     # one worker compiles the h100-8 programs once

H100 = DATA_DIR / "chips" / "h100.toml"


@pytest.fixture(scope="module")
def h100_8():
    return pm.load_system("h100-8")


@pytest.fixture(scope="module")
def greedy_plan(h100_8, mlperf):
    return pm.default_plan(h100_8, mlperf)


def _chip_with(tmp_path, line_after: str, extra: str):
    """A copy of the h100 chip with `extra` after the line starting `line_after`, and a system of 8 on it."""
    key = extra.split("=")[0].strip()
    lines = [ln for ln in H100.read_text().splitlines() if not ln.startswith(key + " ")]   # the file's own range
    k = next(i for i, ln in enumerate(lines) if ln.startswith(line_after))
    lines.insert(k + 1, extra)
    chip = tmp_path / "chip.toml"
    chip.write_text("\n".join(lines) + "\n")
    return chip


# ------------------------------------------------------------------------------------ the inputs

def test_provenance_defaults_and_stated_ranges(h100_8):
    ins = {i.field: i for i in inputs_of(h100_8)}
    peak = ins["compute.peak_bf16_TFLOPs"]                 # "# source:" -> +- 5 %
    assert peak.provenance == "source" and (peak.lo, peak.hi) == pytest.approx((989 * 0.95, 989 * 1.05))
    launch = ins["compute.launch_overhead_us"]             # the file's own range
    assert launch.provenance == "stated" and (launch.lo, launch.hi) == pytest.approx((1.3, 2.5))
    eff = ins["memory.hbm_usable_fraction"]                # assumed 0.9 +- 30 % passes the field's 1.0:
    assert (eff.lo, eff.hi) == pytest.approx((0.8, 1.0))    # narrowed to stay centred on 0.9
    gather = ins["memory.gather_efficiency_max"]           # the file's own range
    assert gather.provenance == "stated" and (gather.lo, gather.hi) == (0.43, 0.56)
    assert "memory.hbm_capacity_GB" not in ins             # a datasheet capacity is exact
    assert "compute.compute_units" not in ins              # counts are exact
    assert all(i.name.startswith("h100:") for i in inputs_of(h100_8))
    assert DEFAULT_SPREAD["untagged"] == DEFAULT_SPREAD["assumed"]


def test_a_systems_nic_override_is_its_input():
    ins = {i.field: i for i in inputs_of(pm.load_system("h100p5-16"))}
    lat = ins["nic.latency_us"]                            # set by the system file's [nic], tagged source there
    assert lat.file.endswith("h100p5.toml") and lat.name == "h100p5:nic.latency_us" and lat.provenance == "source"
    assert (lat.lo, lat.hi) == pytest.approx((19.0, 21.0))
    assert any(f.startswith("network.levels[") for f in ins)


def test_relative_range_and_model_ranges(tmp_path, mlperf):
    chip = _chip_with(tmp_path, "latency_us = 1.0", 'latency_us_range = "50%"   # assumed: a test')
    s = pm.load_system("h100-8", chip=str(chip))
    lat = {i.field: i for i in inputs_of(s)}["nic.latency_us"]
    assert (lat.lo, lat.hi, lat.provenance) == (0.5, 1.5, "stated")
    assert inputs_of(s, mlperf) == inputs_of(s)            # a model's numbers are exact unless it states a range
    text = (DATA_DIR / "models" / "dlrm-dcnv2-mlperf.toml").read_text()
    text = text.replace("\naccess_zipf = [", '\naccess_zipf_range = "10%"\naccess_zipf = [', 1)
    path = tmp_path / "model.toml"
    path.write_text(text)
    m = pm.load_model(path)
    zipf = [i for i in inputs_of(s, m) if i.field == "embeddings.access_zipf"]
    assert len(zipf) == 1 and zipf[0].factor and (zipf[0].lo, zipf[0].hi) == pytest.approx((0.9, 1.1))


@pytest.mark.parametrize("extra, says", [
    ("hbm_efficiency_range = [0.95, 0.80]", "lo > hi"),
    ("hbm_efficiency_range = [0.5, 1.2]", "within what hbm_efficiency allows"),
    ("hbm_efficiency_range = [0.95, 0.99]", "must hold the value 0.9"),
    ('hbm_efficiency_range = "-5%"', "N%"),
    ('hbm_efficiency_range = "150%"', "N%"),
    ('hbm_efficiency_range = "wide"', "N%"),
    ("hbm_efficiency_range = [0.8]", "N%"),
    ("hbm_capacity_GB_range = [81, 90]", "must hold the value 80"),
])
def test_bad_ranges_get_one_clear_error(tmp_path, extra, says):
    chip = _chip_with(tmp_path, "hbm_efficiency =", extra)
    with pytest.raises(ConfigError) as err:
        pm.load_chip(chip)
    assert str(chip) in str(err.value) and "_range" in str(err.value) and says in str(err.value)


def test_integer_fields_refuse_ranges(tmp_path):
    chip = _chip_with(tmp_path, "compute_units =", 'compute_units_range = "10%"')
    with pytest.raises(ConfigError, match="compute_units_range.*exact"):
        pm.load_chip(chip)


# ----------------------------------------------------------------------------------- propagation

def test_latin_hypercube_strata_and_seed():
    u = P.design(100, 3, seed=7)
    for j in range(3):                                     # one draw in each of the 100 strata of every input
        assert sorted(np.floor(u[:, j] * 100).astype(int)) == list(range(100))
    assert np.array_equal(u, P.design(100, 3, seed=7)) and not np.array_equal(u, P.design(100, 3, seed=8))


def test_draws_at_the_files_values_give_the_nominal_step(h100_8, mlperf, greedy_plan):
    ins = inputs_of(h100_8, mlperf)
    nominal = np.asarray([[i.value * i.scale for i in ins]] * 4)
    figs = P.evaluate_draws(h100_8, mlperf, to_arrays(greedy_plan, h100_8, mlperf), ins, nominal)
    step = float(pm.evaluate(h100_8, mlperf, greedy_plan).step_s)
    assert figs["step_s"] == pytest.approx([step] * 4, rel=1e-5)


def test_one_input_moves_the_step_as_the_model_says(h100_8, mlperf, greedy_plan):
    """The host's step overhead adds to the step one for one (cost/overhead.py): drawn at +6 us, the
    step is 6 us longer."""
    ins = [i for i in inputs_of(h100_8, mlperf) if i.field == "host.step_overhead_us"]
    pa = to_arrays(greedy_plan, h100_8, mlperf)
    figs = P.evaluate_draws(h100_8, mlperf, pa, ins, np.asarray([[20e-6], [26e-6]]))
    assert figs["step_s"][1] - figs["step_s"][0] == pytest.approx(6e-6, rel=0.02)


def test_propagate_is_deterministic_and_ordered(h100_8, mlperf, greedy_plan):
    a = P.uncertainty(h100_8, mlperf, greedy_plan, draws=64, seed=3)
    b = P.uncertainty(h100_8, mlperf, greedy_plan, draws=64, seed=3)
    c = P.uncertainty(h100_8, mlperf, greedy_plan, draws=64, seed=4)
    assert np.array_equal(a.samples["step_s"], b.samples["step_s"])
    assert not np.array_equal(a.samples["step_s"], c.samples["step_s"])
    q = a.quantiles()
    assert q["p10"] < q["p50"] < q["p90"]
    assert a.nominal["step_s"] == pytest.approx(float(pm.evaluate(h100_8, mlperf, greedy_plan).step_s), rel=1e-6)
    # throughput is the batch over the step, draw by draw, the model's error included
    assert a.samples["samples_per_s"] * a.samples["step_s"] == pytest.approx(np.full(64, 65536.0), rel=1e-4)


def test_the_model_error_alone_by_hand(h100_8, mlperf, greedy_plan):
    """A system built in code has no files, so no inputs: the draws are the nominal step x exp(eps),
    eps ~ Normal(mean, sigma), and the Latin hypercube puts p90 / p50 at exp(1.2816 sigma)."""
    bare = System(chip=h100_8.chip, nic=h100_8.nic, offload=h100_8.offload, levels=h100_8.levels,
                              host_power_W=h100_8.host_power_W, host_usd_per_hour=h100_8.host_usd_per_hour,
                              num_chips=8, chips_per_host=8, name="bare")
    me = P.ModelError(mean=0.1, sigma=0.2, residual_sigma=0.2, input_sigma=0.0, rows=1)
    res = P.propagate([bare], [mlperf], [greedy_plan], draws=2000, seed=0, model_error=me)[0]
    assert res.inputs == []
    q = res.quantiles()
    assert q["p50"] == pytest.approx(res.nominal["step_s"] * math.exp(0.1), rel=2e-3)
    assert q["p90"] / q["p50"] == pytest.approx(math.exp(1.2816 * 0.2), rel=3e-3)


def test_ratio_and_probability_faster():
    def fake(x):
        return P.Uncertain({"step_s": float(np.median(x))}, {"step_s": np.asarray(x, float)}, [], P.NO_MODEL_ERROR,
                           np.zeros((len(x), 0)), np.zeros(len(x)))
    a, b = fake([1.0, 2.0, 3.0, 4.0]), fake([2.0, 2.0, 2.0, 2.0])
    r = ratio(a, b)
    assert r["prob_faster"] == 0.25                        # a below b in one draw of four
    assert r["p50"] == pytest.approx(1.25) and r["nominal"] == pytest.approx(1.25)


def test_bad_draws_and_seeds():
    for bad in (0, 1, -5, P.MAX_DRAWS + 1, 2.5, True, "10"):
        with pytest.raises(ConfigError, match="uncertainty"):
            P.check_draws(bad)
    with pytest.raises(ConfigError, match="seed"):
        P.check_seed(-1)


# -------------------------------------------------------------------- the decomposition

def test_the_model_errors_share_is_its_variance_share(h100_8, mlperf, greedy_plan):
    """The model's error adds an independent normal to log(step): its Sobol' index is
    sigma^2 / (sigma^2 + the inputs' variance of log step)."""
    me = P.ModelError(mean=0.0, sigma=0.1, residual_sigma=0.1, input_sigma=0.0, rows=1)
    rows = sources(h100_8, mlperf, greedy_plan, n=128, seed=0, model_error=me)
    err = next(r for r in rows if r.name == MODEL_ERROR_NAME)
    alone = P.uncertainty(h100_8, mlperf, greedy_plan, draws=2000, seed=1, model_error=False)
    var_in = np.var(np.log(alone.samples["step_s"]))
    assert err.first == pytest.approx(me.sigma ** 2 / (me.sigma ** 2 + var_in), abs=0.08)
    assert sum(max(r.first, 0) for r in rows) < 1.1
    top = rows[0] if rows[0].name != MODEL_ERROR_NAME else rows[1]
    assert top.provenance in ("stated", "assumed")         # a datasheet value never leads


# ------------------------------------------------------------------------- the model's error

def test_model_error_recomputes_and_intervals_are_calibrated():
    """model_error.json is what the validation rows give now (a stale file would mislead every
    interval), and the measured step lies inside the 80 % interval in 70-90 % of the runs, also
    leaving one system out and leaving one generation out."""
    rows = ME.validation_rows()
    spreads = ME.row_spreads(rows, ME.FIT_DRAWS, 0)
    for r, s in zip(rows, spreads):                        # the presets still give the stored run-plan steps
        assert s["run_plan_ms"] == pytest.approx(r["run_plan_ms"], rel=1e-5)
    me, stored = ME.fit(spreads), P.load_model_error()
    assert (me.mean, me.sigma, me.input_sigma, me.transfer_sigma) == pytest.approx(
        (stored.mean, stored.sigma, stored.input_sigma, stored.transfer_sigma), abs=1e-4)
    assert [(f, n) for f, _, n in me.families] == [(f, n) for f, _, n in stored.families]
    assert [m for _, m, _ in me.families] == pytest.approx([m for _, m, _ in stored.families], abs=1e-4)
    inside = ME.coverage(spreads, me, 0)
    assert 0.7 <= sum(inside) / len(inside) <= 0.9
    # on machines and generations the fit did not see: each system's, then each chip family's rows
    # at the parameters and the error fitted without them
    for held in (ME.loso_coverage(spreads, 0), ME.logo_coverage(spreads, 0)):
        assert len(held) == len(rows) and 0.7 <= sum(held) / len(held) <= 0.9


# --------------------------------------------------------------------------------------- the CLI

def test_cli_evaluate_and_compare_json(capsys):
    rc = main(["evaluate", "--system", "h100-8", "--model", "dlrm-dcnv2-mlperf", "--plan", "greedy",
               "--uncertainty", "64", "--json", "--quiet"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["uncertainty"]["draws"] == 64
    q = out["uncertainty"]["step_s"]
    assert q["p10"] <= q["p50"] <= q["p90"] and q["nominal"] == pytest.approx(out["summary"]["step_s"])
    rc = main(["compare", "--systems", "h100-8,a100-8", "--model", "dlrm-dcnv2-mlperf", "--plan", "greedy",
               "--uncertainty", "64", "--json", "--quiet"])
    out = json.loads(capsys.readouterr().out)
    v = out["uncertainty"]["versus"][0]
    assert rc == 0 and (v["system"], v["other"]) == ("h100-8", "a100-8") and 0.0 <= v["prob_faster"] <= 1.0
    steps = {s["system"]: s["step_ms"] for s in out["systems"]}
    assert v["step_ratio"]["nominal"] == pytest.approx(steps["a100-8"] / steps["h100-8"], rel=1e-5)


@pytest.mark.parametrize("argv, says", [
    (["evaluate", "--system", "h100-8", "--model", "dlrm-small", "--plan", "greedy", "--uncertainty", "0"], "--uncertainty"),
    (["evaluate", "--system", "h100-8", "--model", "dlrm-small", "--plan", "greedy", "--uncertainty", "5",
      "--uncertainty-seed", "-1"], "--uncertainty-seed"),
    (["uncertainty", "--system", "h100-8", "--model", "dlrm-small", "--draws", "100"], "--draws"),
    (["uncertainty", "--model", "dlrm-small"], "--system"),
])
def test_cli_bad_uncertainty_arguments(capsys, argv, says):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]


def test_cli_lists_inputs(capsys):
    assert main(["uncertainty", "--system", "h100-8", "--model", "dlrm-small", "--inputs"]) == 0
    out = capsys.readouterr().out
    assert "h100:memory.gather_efficiency_max" in out and "stated" in out and "0.43 .. 0.56" in out


def test_python_compare_and_attribute_take_uncertainty():
    t = pm.compare(["h100-8", "a100-8"], "dlrm-dcnv2-mlperf", plan="greedy", uncertainty=64)
    c = pm.analysis.table.columns(t)
    assert list(c["system"]) == ["h100-8", "a100-8"]
    assert c["step_vs_first_p50"][0] == pytest.approx(1.0) and math.isnan(c["prob_first_faster"][0])
    assert 0.0 <= c["prob_first_faster"][1] <= 1.0 and c["step_ms_p10"][1] <= c["step_ms_p90"][1]
    with pytest.raises(ConfigError, match="breakdowns"):
        pm.compare(["h100-8"], "dlrm-dcnv2-mlperf", plan="greedy", breakdowns={}, uncertainty=64)
    a = pm.attribute("h100-8", "mtia300-16", "dlrm-small", plan="greedy", uncertainty=32, workers=1)
    d = a.to_dict()["uncertainty"]
    assert set(d["shares_s"]) == set(a.shares_s) and d["draws"] == 32
    # the shares add up draw by draw to what the factors cover: the gap less the rest
    sd = a.uncertainty
    assert sum(sd.shares.values()) + sd.rest == pytest.approx(sd.gap, rel=1e-6, abs=1e-12)
    assert "uncertainty of the shares" in a.format()
