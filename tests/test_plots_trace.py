"""Chrome traces are valid, non-overlapping per thread and add up to the Breakdown; plots run headless."""

import json

import jax
import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")                      # headless, whatever MPLBACKEND says
import matplotlib.pyplot as plt  # noqa: E402

import perfmodel as pm  # noqa: E402
from perfmodel import plots  # noqa: E402
from perfmodel.analysis import sweep  # noqa: E402
from perfmodel.analysis.scaling import compare, scaling  # noqa: E402
from perfmodel.evaluate import COMM_PHASES  # noqa: E402
from perfmodel.trace import chrome_trace, device_slices, sample_devices, save_trace  # noqa: E402

from conftest import breakdown_fn  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


def round_robin(system, model, **kw):
    D = system.num_chips
    return pm.Plan(tables={n: pm.TablePlan("table_wise", [i % D]) for i, n in enumerate(model.tables.names)},
                   offload=float(system.offload.engines) > 0, **kw)


def _bd(system, model, plan):
    pa = plan if isinstance(plan, pm.PlanArrays) else pm.to_arrays(plan, system, model)
    return jax.device_get(breakdown_fn(model.name)(system, pa))


@pytest.fixture(scope="module")
def cases(mtia64, small):
    """Breakdowns of dlrm-small: MTIA 300 x 64 under a hybrid and a fully sharded plan (parameter
    all-gathers, chunked all-to-alls, pipelining off) and under random plans; H100 x 8."""
    h100 = pm.load_system("h100-8")
    out = [(mtia64, _bd(mtia64, small, round_robin(mtia64, small, dense="hybrid", overlap_chunks=4))),
           (mtia64, _bd(mtia64, small, round_robin(mtia64, small, dense="fully_sharded", pipeline=False,
                                                    overlap_chunks=2, grad_buckets=16))),
           (h100, _bd(h100, small, round_robin(h100, small)))]
    for system in (mtia64, h100):
        plans = pm.random_plans(jax.random.PRNGKey(3), system, small, 6)
        for i in range(6):
            out.append((system, _bd(system, small, jax.tree_util.tree_map(lambda x, i=i: x[i], plans))))
    return out


def check_trace(tr: dict, bd, system) -> None:
    tr = json.loads(json.dumps(tr))                         # valid JSON, plain types only
    step_us = float(bd.step_s) * 1e6
    tol = 1e-5 * step_us
    xs = [e for e in tr["traceEvents"] if e["ph"] == "X"]
    meta = [e for e in tr["traceEvents"] if e["ph"] == "M"]
    assert xs and all({"name", "ph", "ts", "dur", "pid", "tid", "args"} <= set(e) for e in xs)
    shown = tr["otherData"]["shown_devices"]
    assert {e["pid"] for e in xs} == set(shown)
    names = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert set(names) == set(shown)
    comp = np.asarray(bd.compute_s)
    slowest = int(np.argmax(comp))
    for pid in shown:
        for tid, stream in ((1, "compute"), (2, "comm"), (3, "idle")):
            ev = sorted((e for e in xs if e["pid"] == pid and e["tid"] == tid), key=lambda e: e["ts"])
            assert all(e["cat"] == stream and e["dur"] > 0 for e in ev)
            for a, b in zip(ev, ev[1:]):
                assert a["ts"] + a["dur"] <= b["ts"] + 1e-9 * step_us, (pid, stream, a["name"], b["name"])
            assert all(-1e-9 <= e["ts"] and e["ts"] + e["dur"] <= step_us + tol for e in ev), (pid, stream)
            total = sum(e["dur"] for e in ev)
            if stream == "compute":
                assert total == pytest.approx(comp[pid] * 1e6, rel=1e-5, abs=1e-6)
            elif stream == "comm":
                assert total == pytest.approx(float(bd.comm_s) * 1e6, rel=1e-5, abs=tol)
            else:
                assert total == pytest.approx(step_us - comp[pid] * 1e6, rel=1e-4, abs=tol)
                if pid == slowest:
                    assert total == pytest.approx(float(bd.exposed_comm_s) * 1e6, rel=1e-4, abs=tol)
        comm = [e for e in xs if e["pid"] == pid and e["tid"] == 2]
        for e in comm:
            if e["name"] in COMM_PHASES:
                assert e["args"]["bytes"] >= 0
    for e in xs:
        if e["tid"] == 1 and e["name"] in ("top_fwd", "bottom_fwd", "top_bwd", "bottom_bwd"):
            assert e["args"]["flops"] > 0


def test_traces_are_valid_and_add_up(cases, small):
    for system, bd in cases:
        check_trace(chrome_trace(bd, small), bd, system)


def test_trace_samples_devices(cases, small):
    system, bd = cases[0]
    assert system.num_chips == 64
    comp = np.asarray(bd.compute_s)
    picks = dict(sample_devices(bd, 5))
    assert len(picks) == 5 and int(np.argmax(comp)) in picks and int(np.argmin(comp)) in picks
    tr = chrome_trace(bd, small, max_devices=5)
    assert tr["otherData"]["shown_devices"] == sorted(picks)
    assert any("slowest" in e["args"]["name"] for e in tr["traceEvents"] if e["name"] == "process_name")
    tr = chrome_trace(bd, small, devices=[3, 9])
    assert tr["otherData"]["shown_devices"] == [3, 9]
    with pytest.raises(pm.ConfigError, match="rank 64 does not exist"):
        chrome_trace(bd, small, devices=[64])


def test_trace_shows_the_parameter_all_gather_and_pipelining(cases, small):
    """A fully sharded plan: the parameter all-gathers are inside dense_sync, so the comm slices add up
    to comm_s, with an extra slice only for what lies beyond the phases (chunking overhead).
    Pipelining on: the next batch's input all-to-all is on the stream."""
    _, hybrid = cases[0]
    _, fsdp = cases[1]
    slices = device_slices(fsdp, 0, small)
    assert not [s for s in slices if s.name == "comm_s beyond the phases"]      # all-gathers sit in dense_sync
    comm = [s for s in slices if s.name in ("input_dist", "output_dist", "grad_dist", "dense_sync")]
    assert sum(s.dur_s for s in comm) == pytest.approx(float(fsdp.comm_s), rel=1e-4)
    nxt = [s for s in device_slices(hybrid, 0, small) if s.name == "input_dist"]
    assert any("next step" in s.args["batch"] for s in nxt)
    assert sum(s.dur_s for s in nxt) == pytest.approx(float(np.max(hybrid.phase_s["input_dist"])), rel=1e-5)


def test_save_trace_never_overwrites(cases, small, tmp_path):
    _, bd = cases[2]
    save_trace(chrome_trace(bd, small), tmp_path / "t.json")
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    with pytest.raises(pm.ConfigError, match="exists already"):
        save_trace(chrome_trace(bd, small), tmp_path / "t.json")


# ------------------------------------------------------------------------------------------ plots

def _png(path):
    data = path.read_bytes()
    assert data[:8] == PNG and len(data) > 10_000, path
    return data


def test_breakdown_and_timeline_plots(cases, small, tmp_path):
    (mtia, bd_m), _, (h100, bd_h) = cases[:3]
    fig, ax = plt.subplots()
    assert plots.breakdown({"mtia300-64": bd_m, "h100-8": bd_h}, ax=ax) is ax
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert any("mtia300-64" in t for t in labels) and "communication" in labels
    assert ax.get_xlabel() == "time per training step [ms]"
    plots.save_figure(ax, tmp_path / "b.png")
    _png(tmp_path / "b.png")
    ax = plots.timeline(bd_m, model=small, max_devices=3)
    assert len(ax.get_yticks()) == 6
    plots.save_figure(ax, tmp_path / "t.png")
    _png(tmp_path / "t.png")
    ax = plots.timeline(bd_h, devices=[0, 7])
    with pytest.raises(pm.ConfigError, match="exists already"):
        plots.save_figure(ax, tmp_path / "t.png")
    plots.save_figure(ax, tmp_path / "t.png", overwrite=True)
    plt.close("all")


def test_sweep_and_tradeoff_plots(mtia64, small, tmp_path):
    plan = round_robin(mtia64, small, dense="hybrid")
    t = sweep(mtia64, small, {"scale_out_bandwidth_GBps": [25, 50, 100, 200], "nic_attach_pcie": [0, 1],
                              "offload_engines": [0, 16]}, plan=plan)
    ax = plots.tradeoff(t)
    assert len(ax.get_lines()) == 4 and ax.get_xscale() == "linear"
    legend = [x.get_text() for x in ax.get_legend().get_texts()]
    assert "integrated NIC, core-driven collectives" in legend and "NIC behind PCIe, 16 offload engines" in legend
    assert ax.get_xlabel() == "scale_out_bandwidth_GBps [GB/s]" and ax.get_ylabel() == "step time [ms]"
    assert ax.get_title() == "Step time vs scale-out NIC bandwidth (plan: given plan)"
    plots.save_figure(ax, tmp_path / "tradeoff.png")
    _png(tmp_path / "tradeoff.png")
    ax = plots.sweep_lines(t, "scale_out_bandwidth_GBps", "exposed_comm_ms", by=["nic_attach_pcie"])
    assert len(ax.get_lines()) >= 2
    plt.close("all")
    with pytest.raises(pm.ConfigError, match="no column 'nope'"):
        plots.sweep_lines(t, "scale_out_bandwidth_GBps", "nope")


def test_scaling_and_pareto_plots(small, tmp_path):
    rr = lambda s, m: round_robin(s, m)
    strong = scaling("h100-8", small, [8, 16], mode="strong", plan=rr, executor="serial")
    weak = scaling("h100-8", small, [8, 16], mode="weak", plan=rr, executor="serial")
    from perfmodel.analysis.table import columns, make_table
    s, w = columns(strong), columns(weak)
    assert list(s["chips"]) == [8, 16] and s["efficiency"][0] == pytest.approx(1.0)
    assert list(w["global_batch"]) == [4096, 8192] and list(s["global_batch"]) == [4096, 4096]
    assert w["efficiency"][1] == pytest.approx(w["samples_per_s"][1] / w["samples_per_s"][0] / 2)
    both = make_table({k: np.concatenate([s[k], w[k]]) for k in s})
    plots.save_figure(plots.scaling(both), tmp_path / "s.png")
    _png(tmp_path / "s.png")
    c = columns(compare(["h100-8", "mtia300-16"], small, plan=rr, executor="serial"))
    assert list(c["system"]) == ["h100-8", "mtia300-16"]
    assert np.allclose(c["power_W"], c["joules_per_sample"] * c["samples_per_s"])
    assert list(plots.pareto_front(np.asarray([1.0, 2.0, 3.0]), np.asarray([1.0, 3.0, 2.0]))) == [True, True, False]
    plots.save_figure(plots.pareto(c, x="power_W"), tmp_path / "p.png")
    _png(tmp_path / "p.png")
    with pytest.raises(pm.ConfigError, match="mode.*allowed: strong, weak"):
        scaling("h100-8", small, [8], mode="sideways")
