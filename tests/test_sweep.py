"""Sweeps: one vmapped call equals evaluation point by point; knobs set what their names say."""

import dataclasses
import functools
import importlib
import json
from types import SimpleNamespace

import jax.numpy as jnp
import numpy as np
import pytest

import perfmodel as pm
from perfmodel import cache
from perfmodel.analysis import KNOBS, parse_values, parse_vary, set_knobs, sweep
from perfmodel.analysis import table as tbl
from perfmodel.analysis.sweep import COLUMNS
from perfmodel.evaluate import evaluate_arrays
from perfmodel.hardware import link_bandwidths
from perfmodel.report import summary

GB = 1e9


def round_robin(system, model, **kw):
    """A cheap plan (no planner run): table i table-wise on rank i mod D."""
    D = system.num_chips
    return pm.Plan(tables={n: pm.TablePlan("table_wise", [i % D]) for i, n in enumerate(model.tables.names)},
                   offload=float(system.offload.engines) > 0, **kw)


@pytest.fixture(scope="module")
def mtia_small(mtia64, small):
    """MTIA 300, 4 racks of 16 (scale-up and scale-out levels), the small DLRM, a fixed plan."""
    return mtia64, small, round_robin(mtia64, small, dense="hybrid", grad_buckets=4, overlap_chunks=2)


@pytest.fixture(scope="module")
def h100_8():
    return pm.load_system("h100-8")


@functools.lru_cache(maxsize=None)
def _jitted():
    return cache.jit(lambda s, m, p: evaluate_arrays(s, m, p, 0.0), quick=True)     # as pm.evaluate compiles it


def _by_hand(system, out_GBps=None, engines=None):
    """The system with a new scale-out bandwidth / engine count, built without the knob module:
    on a NIC that also serves scale-up, the scale-up bandwidth stays (total' = up + out')."""
    nic = system.nic
    if out_GBps is not None:
        total = float(nic.active_ports * nic.port_Bps)
        if nic.serves_scale_up:
            up = float(nic.scale_up_fraction) * total
            new_total = up + out_GBps * GB
            nic = dataclasses.replace(nic, port_Bps=jnp.float32(new_total / float(nic.active_ports)),
                                      scale_up_fraction=jnp.float32(up / new_total))
        else:
            nic = dataclasses.replace(nic, port_Bps=jnp.float32(out_GBps * GB / float(nic.active_ports)))
    off = system.offload if engines is None else dataclasses.replace(system.offload, engines=jnp.float32(engines))
    return system.replace(nic=nic, offload=off)


def test_sweep_equals_pointwise_evaluation(mtia_small):
    system, model, plan = mtia_small
    vary = {"scale_out_bandwidth_GBps": [50.0, 400.0], "offload_engines": [0, 16],
            "a2a_precision": ["fp32", "bf16"], "global_batch": [4096, 16384]}
    t = tbl.columns(sweep(system, model, vary, plan=plan))
    assert len(t["step_ms"]) == 16
    # grid order: the first knob varies slowest
    assert list(t["scale_out_bandwidth_GBps"][:8]) == [50.0] * 8
    assert list(t["global_batch"][:2]) == [4096, 16384]
    assert list(t)[:4] == list(vary) and list(t)[4:] == list(COLUMNS) + ["plan", "error"]
    assert set(t["plan"]) == {"given plan"} and set(t["error"]) == {""}
    for i in range(16):
        s = _by_hand(system, t["scale_out_bandwidth_GBps"][i], t["offload_engines"][i])
        m = dataclasses.replace(model, global_batch=jnp.float32(t["global_batch"][i]))
        p = dataclasses.replace(plan, a2a_precision=str(t["a2a_precision"][i]))
        bd = _jitted()(s, m, pm.to_arrays(p, s, m))
        ref = summary(bd)
        for col in ("step_ms", "samples_per_s", "exposed_comm_ms", "mfu", "memory_max_GB", "comm_busy_ms",
                    "compute_busy_max_ms", "interference_max_ms", "usd_per_million_samples"):
            key, factor = COLUMNS[col]
            assert t[col][i] == pytest.approx(ref[key] * factor, rel=2e-5, abs=1e-12), (i, col)
        assert bool(t["feasible"][i]) == ref["feasible"]
        for p_ in pm.PHASES:
            assert t[f"{p_}_busy_max_ms"][i] == pytest.approx(float(np.max(bd.phase_s[p_])) * 1e3, rel=2e-5, abs=1e-9)
        up, out = link_bandwidths(s)
        assert t["scale_out_link_GBps"][i] == pytest.approx(t["scale_out_bandwidth_GBps"][i], rel=1e-5)
        assert t["scale_up_link_GBps"][i] == pytest.approx(float(up) / GB, rel=1e-5)
    # the knob changed what it says: scale-up stays at the preset's 800 GB/s on MTIA 300
    assert np.allclose(t["scale_up_link_GBps"], 800, rtol=1e-5)
    # more scale-out bandwidth never slows the step; fp8/bf16 all-to-alls move half the bytes
    assert np.all(t["step_ms"][8:] <= t["step_ms"][:8] * (1 + 1e-6))
    assert np.all(t["output_dist_busy_max_ms"][2::4] < t["output_dist_busy_max_ms"][0::4])
    # preset names work as the objects do (sweep, compare)
    named = tbl.columns(sweep("mtia300-64", "dlrm-small", vary, plan=plan))
    assert np.array_equal(named["step_ms"], t["step_ms"])
    row = tbl.columns(pm.compare(["mtia300-64"], "dlrm-small", plan=lambda s, m: plan))
    assert row["step_ms"][0] == pytest.approx(float(pm.evaluate(system, model, plan).step_s) * 1e3, rel=1e-6)


def test_chunked_sweep_equals_separate_calls(mtia_small):
    """20 points in chunks of 16 (the last one padded) equal two paired sweeps of 16 and 4 points."""
    system, model, plan = mtia_small
    vary = {"scale_out_bandwidth_GBps": np.linspace(25, 400, 10), "offload_engines": [0, 16],
            "a2a_precision": ["fp32"], "global_batch": [4096]}
    whole = tbl.columns(sweep(system, model, vary, plan=plan, chunk=16))
    assert len(whole["step_ms"]) == 20
    for lo, hi in ((0, 16), (16, 20)):
        part = tbl.columns(sweep(system, model, {k: list(whole[k][lo:hi]) for k in vary}, plan=plan, paired=True))
        for k in whole:
            assert np.array_equal(whole[k][lo:hi], part[k]), k


def test_a_long_sweep_compiles_for_speed_and_gives_the_quick_programs_figures(mtia_small, monkeypatch):
    """A sweep of more than QUICK_CHUNKS chunks runs the program compiled for speed, a shorter one
    the quick-compiled one; the figures agree to float32 rounding."""
    system, model, plan = mtia_small
    swp = importlib.import_module("perfmodel.analysis.sweep")
    used = []
    for name in ("_run", "_run_quick"):
        fn = getattr(swp, name)
        monkeypatch.setattr(swp, name, lambda *a, fn=fn, name=name: used.append(name) or fn(*a))
    vary = {"scale_out_bandwidth_GBps": np.linspace(25, 400, 16 * swp.QUICK_CHUNKS + 3)}
    long = tbl.columns(sweep(system, model, vary, plan=plan, chunk=16))
    assert set(used) == {"_run"} and len(used) == swp.QUICK_CHUNKS + 1
    used.clear()
    short = tbl.columns(sweep(system, model, vary, plan=plan, chunk=256))
    assert used == ["_run_quick"]
    for k in ("step_ms", "exposed_comm_ms", "samples_per_s"):
        np.testing.assert_allclose(long[k], short[k], rtol=1e-5, err_msg=k)
    assert len(set(np.round(long["step_ms"], 6))) > 1          # the knob moves the step


def test_pcie_cap_dedicated_scale_up_and_engines(h100_8, small):
    """On an H100 the NIC sits behind a 63 GB/s PCIe link: the effective scale-out bandwidth is
    min(NIC, PCIe), and the NVLink scale-up stays; an integrated NIC (nic_attach_pcie = 0) is uncapped.
    offload_engines > 0 gets MTIA 300's engine design, and the plan (made without engines) uses them:
    no compute units lost to collectives, so less interference than core-driven."""
    plan = round_robin(h100_8, small)
    assert plan.offload is False
    vary = {"scale_out_bandwidth_GBps": [25, 50, 100, 200], "nic_attach_pcie": [1, 0], "offload_engines": [0, 16]}
    t = tbl.columns(sweep(h100_8, small, vary, plan=plan))
    bw = t["scale_out_bandwidth_GBps"] * GB
    cap = np.where(t["nic_attach_pcie"] == 1, np.minimum(bw, 63 * GB), bw)
    assert np.allclose(t["scale_out_link_GBps"] * GB, cap, rtol=1e-5)
    assert np.allclose(t["scale_up_link_GBps"], 450, rtol=1e-5)
    core, eng = t["offload_engines"] == 0, t["offload_engines"] == 16
    assert np.all(t["interference_max_ms"][eng] < t["interference_max_ms"][core])
    pa = pm.to_arrays(plan, h100_8, small)
    st = set_knobs(h100_8, small, pa, offload_engines=16)
    assert float(st.plan.offload) == 1.0 and float(st.system.offload.clock_Hz) == pytest.approx(1.9e9)
    s50 = _by_hand(h100_8, 50.0)
    assert t["step_ms"][2] == pytest.approx(float(_jitted()(s50, small, pa).step_s) * 1e3, rel=2e-5)   # 50 GB/s, PCIe, core


def test_paired_lists(mtia_small):
    system, model, plan = mtia_small
    vary = {"scale_out_bandwidth_GBps": [50, 100, 400], "offload_engines": [16, 0, 16],
            "a2a_precision": ["fp32", "fp32", "fp32"], "global_batch": [4096, 4096, 4096]}
    t = tbl.columns(sweep(system, model, vary, plan=plan, paired=True))
    assert list(t["scale_out_bandwidth_GBps"]) == [50, 100, 400]
    assert list(t["offload_engines"]) == [16, 0, 16]
    grid = tbl.columns(sweep(system, model, {k: v[:1] if k != "scale_out_bandwidth_GBps" else [100]
                                             for k, v in vary.items()} | {"offload_engines": [0]}, plan=plan))
    assert t["step_ms"][1] == pytest.approx(grid["step_ms"][0], rel=1e-6)
    assert t["step_ms"][2] < t["step_ms"][0]
    with pytest.raises(pm.ConfigError, match="one length per knob"):
        sweep(system, model, {"scale_out_bandwidth_GBps": [50, 100], "offload_engines": [0]}, paired=True)


def test_replan_runs_the_planner_once_per_hardware_point(mtia_small):
    system, model, plan = mtia_small
    calls = []

    def planner(s, m):
        calls.append(float(link_bandwidths(s)[1]))
        return plan

    vary = {"scale_out_bandwidth_GBps": [50, 400], "a2a_precision": ["fp32", "bf16"],
            "offload_engines": [16], "global_batch": [4096]}
    re = tbl.columns(sweep(system, model, vary, plan=planner))
    assert sorted(calls) == pytest.approx([50 * GB, 400 * GB], rel=1e-5)   # plan knobs do not re-plan
    assert set(re["plan"]) == {"planner"}
    fixed = tbl.columns(sweep(system, model, vary, plan=plan))
    assert np.allclose(re["step_ms"], fixed["step_ms"], rtol=1e-6)
    calls.clear()
    # a callable may return a search result that carries the plan
    again = tbl.columns(sweep(system, model, vary, plan=lambda s, m: SimpleNamespace(plan=planner(s, m))))
    assert len(calls) == 2 and np.array_equal(again["step_ms"], re["step_ms"])
    with pytest.raises(pm.ConfigError, match=r"'replan'; allowed: 'search', 'greedy', a Plan"):
        sweep(system, model, vary, plan="replan")


def test_knob_getters_round_trip(mtia64, h100_8, small):
    """For every knob that applies: set it to 1.5x its value (or another choice) and read it back."""
    for system in (mtia64, h100_8):
        pa = pm.to_arrays(round_robin(system, small), system, small)
        base = pm.knobs.State(system, small, pa)
        for name, k in KNOBS.items():
            if k.applies and k.applies(base):
                continue
            if k.choices:
                v = k.choices[-1]
            else:
                v0 = k.get(base)
                v = 1.0 if k.hi == 1.0 and v0 in (0.0, 1.0) else (round(v0 * 1.5) if k.integer else v0 * 1.5)
                v = min(v, k.hi) if np.isfinite(k.hi) else v
                if v == 0 or (name in ("pooling_scale", "embedding_rows_scale")):
                    v = 2.0 if not k.integer else 2
            st = set_knobs(system, small, pa, **{name: v})
            got = k.get(st)
            if k.choices:
                assert got == v, name
            elif name in ("pooling_scale", "embedding_rows_scale"):
                attr = "pooling" if name == "pooling_scale" else "rows"
                assert np.allclose(getattr(st.model.tables, attr), getattr(small.tables, attr) * v, rtol=1e-6)
            else:
                assert got == pytest.approx(v, rel=1e-5), (system.name, name)


def test_scale_up_knob_keeps_scale_out_on_a_shared_nic(mtia_small):
    mtia, small, plan = mtia_small
    pa = pm.to_arrays(plan, mtia, small)
    st = set_knobs(mtia, small, pa, scale_up_bandwidth_GBps=400.0, scale_out_bandwidth_GBps=300.0)
    up, out = (float(x) for x in link_bandwidths(st.system))
    assert up == pytest.approx(400 * GB, rel=1e-5) and out == pytest.approx(300 * GB, rel=1e-5)
    st = set_knobs(mtia, small, pa, nic_scale_up_fraction=0.9)
    up, out = (float(x) for x in link_bandwidths(st.system))
    assert up + out == pytest.approx(1000 * GB, rel=1e-5) and up == pytest.approx(900 * GB, rel=1e-5)


# ------------------------------------------------------------------------------------------ bad input

@pytest.mark.parametrize("vary, match", [
    ({"scale_out_bandwith_GBps": [1]}, r"unknown knob 'scale_out_bandwith_GBps'; known: scale_out_bandwidth_GBps"),
    ({"scale_out_bandwidth_GBps": [-5]}, r"vary\.scale_out_bandwidth_GBps.*out of range.*>= 0\.001 and <= 1e\+06 \(GB/s\)"),
    ({"scale_out_bandwidth_GBps": [0]}, r"vary\.scale_out_bandwidth_GBps.*out of range"),
    ({"offload_engines": [2.5]}, r"vary\.offload_engines.*an integer >= 0"),
    ({"nic_attach_pcie": [2]}, r"vary\.nic_attach_pcie.*<= 1"),
    ({"a2a_precision": ["fp16"]}, r"vary\.a2a_precision.*allowed: one of fp32, bf16, fp8"),
    ({"a2a_algorithm": ["ring"]}, r"allowed: one of direct, hierarchical"),
    ({"hbm_bandwidth_GBps": ["fast"]}, r"vary\.hbm_bandwidth_GBps.*not a number"),
    ({"hbm_bandwidth_GBps": [float("nan")]}, r"out of range"),
    ({"hbm_bandwidth_GBps": []}, r"vary\.hbm_bandwidth_GBps.*no values"),
    ({}, r"needs at least one knob"),
])
def test_bad_knobs_name_the_knob(mtia16, small, vary, match):
    dp = pm.Plan(tables={n: pm.TablePlan("data_parallel", list(range(16))) for n in small.tables.names})
    with pytest.raises(pm.ConfigError, match=match):
        sweep(mtia16, small, vary, plan=dp)


def test_knob_that_does_not_apply(h100_8, small):
    with pytest.raises(pm.ConfigError, match=r"vary\.nic_scale_up_fraction.*does not carry scale-up"):
        sweep(h100_8, small, {"nic_scale_up_fraction": [0.5]}, plan="greedy")


def test_parse_values():
    assert parse_values("25:400:16", "scale_out_bandwidth_GBps") == pytest.approx(list(np.linspace(25, 400, 16)))
    assert parse_values("25:400:4:log", "scale_out_bandwidth_GBps") == pytest.approx([25, 63.0, 158.74, 400], rel=1e-3)
    assert parse_values("0,16", "offload_engines") == [0, 16]
    assert parse_values("0:16:3", "offload_engines") == [0, 8, 16]
    assert parse_values("1:4:6", "grad_buckets") == [1, 2, 3, 4]          # integers: rounded, repeats dropped
    assert parse_values("fp32,bf16", "a2a_precision") == ["fp32", "bf16"]
    assert parse_vary("hbm_bandwidth_GBps=3350") == ("hbm_bandwidth_GBps", [3350.0])
    for bad, match in (("0:400:4:log", "log spacing needs"), ("1:2", "start:stop:count"), ("a:b:3", "numbers"),
                       ("1:2:0", "count must be from 1 to 10,000,000"), ("", "needs values")):
        with pytest.raises(pm.ConfigError, match=match):
            parse_values(bad, "scale_out_bandwidth_GBps")
    with pytest.raises(pm.ConfigError, match="NAME=VALUES"):
        parse_vary("scale_out_bandwidth_GBps")
    with pytest.raises(pm.ConfigError, match="unknown knob 'bogus'"):
        parse_vary("bogus=1,2")


def test_table_without_pandas(monkeypatch):
    monkeypatch.setattr(tbl, "_pd", None)
    t = tbl.make_table({"a": np.arange(3), "b": np.asarray(["x", "y", "z"], object)})
    assert isinstance(t, dict) and tbl.num_rows(t) == 3
    assert tbl.records(t)[1] == {"a": 1, "b": "y"}
    assert tbl.to_csv_text(t).splitlines() == ["a,b", "0,x", "1,y", "2,z"]


def test_a_failed_point_is_null_in_json_empty_in_csv_and_a_dash_in_text():
    """A failed point's figures are NaN inside the table; no output format may print NaN (a bare
    NaN is not JSON), and float32 noise and exponents stay out of what a user reads."""
    t = tbl.make_table({"x": np.asarray([1.0, 2.0]), "step_ms": np.asarray([np.float32(449.99999488), np.nan]),
                        "samples_per_s": np.asarray([27_774_123.0, np.nan]), "error": np.asarray(["", "no fit"], object)})
    rows = json.loads(tbl.to_json_text(t), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert rows[1] == {"x": 2.0, "step_ms": None, "samples_per_s": None, "error": "no fit"}
    assert tbl.to_csv_text(t).splitlines()[1:] == ["1,450,2.777412e+07,", "2,,,no fit"]
    text = tbl.format_table(t).splitlines()
    assert text[1].split() == ["1", "450", "27,774,123"] and text[2].split() == ["2", "-", "-", "no", "fit"]


def test_save_table_never_overwrites(tmp_path):
    t = tbl.make_table({"a": np.arange(2)})
    tbl.save_table(t, tmp_path / "t.csv")
    with pytest.raises(pm.ConfigError, match="exists already"):
        tbl.save_table(t, tmp_path / "t.csv")
    with pytest.raises(pm.ConfigError, match="does not exist"):
        tbl.save_table(t, tmp_path / "missing" / "t.csv")


def test_a_long_grid_says_its_size_and_counts_its_points(capsys):
    """More than QUICK_CHUNKS vectorized calls: stderr names the points and calls up front (a 10^6-point
    grid ran for minutes in silence); a grid of a few calls stays silent, and both give the same figures
    (to float32's rounding: calls of other widths are other programs)."""
    from perfmodel.analysis.sweep import QUICK_CHUNKS
    system, model = pm.load_system("h100-8"), pm.load_model("dlrm-small")
    plan = pm.default_plan(system, model)
    vary = {"scale_out_bandwidth_GBps": list(np.linspace(25, 400, 2 * (QUICK_CHUNKS + 1)))}
    long = sweep(system, model, vary, plan=plan, chunk=2)
    err = capsys.readouterr().err
    assert err.startswith(f"sweep: evaluating {2 * (QUICK_CHUNKS + 1)} points in {QUICK_CHUNKS + 1} vectorized calls of 2"), err
    short = sweep(system, model, vary, plan=plan)
    assert capsys.readouterr().err == ""
    assert np.asarray(long["step_ms"]) == pytest.approx(np.asarray(short["step_ms"]), rel=1e-6)   # other programs: ulps


def test_binding_names_the_resource_that_bounds_each_point():
    """--binding: the resource whose elasticity is largest at the point's plan. Starve one resource
    at a time and it binds; its elasticity is near 1 (the step all but proportional to it)."""
    system, model = pm.load_system("h100-16"), pm.load_model("dlrm-small")
    plan = pm.default_plan(system, model)
    vary = {"hbm_bandwidth_GBps": [1, 3350, 3350], "scale_out_bandwidth_GBps": [50, 0.05, 50],
            "peak_bf16_TFLOPs": [989, 989, 0.01]}
    t = sweep(system, model, vary, plan=plan, paired=True, binding=True)
    assert list(t["binding"]) == ["HBM", "NIC", "compute"]
    assert all(0.8 < e <= 1.0 + 1e-3 for e in t["binding_elasticity"]), list(t["binding_elasticity"])
    with pytest.raises(pm.ConfigError, match="field 'binding': takes one gradient per point, at most 10,000"):
        sweep(system, model, {"scale_out_bandwidth_GBps": np.linspace(1, 100, 10_001)}, plan=plan, binding=True)
