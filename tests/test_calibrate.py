"""Calibration on the local device: the whole procedure on a tiny grid (measure in a subprocess,
fit through the model, hold out, write a chip preset), and the refusals a user can hit."""

import numpy as np

import perfmodel as pm
from perfmodel import calibrate as cal
from perfmodel.calibrate import timing
from perfmodel.cli import main
from test_presets import uncited


def test_calibrate_fits_through_the_model_and_writes_a_valid_preset(tmp_path, capsys):
    """One run (it measures in a subprocess, then fits): everything about its result."""
    out, csv = tmp_path / "my_chip.toml", tmp_path / "my_chip.csv"
    rep = cal.calibrate(out, grid="tiny", measurements_out=csv, command="pytest tests/test_calibrate.py",
                        log=lambda m: None)
    # the chip file: a valid preset, a source on every number
    chip = pm.load_chip(out)
    assert chip.name == "my_chip"
    text = out.read_text()
    bad, checked = uncited(text)
    assert not bad and checked >= 30
    assert text.count("# source: calibrated") >= 6 and "pytest tests/test_calibrate.py" in text
    assert rep["device"] in text and rep["date"] in text
    for key in ("peak_fp32_flops", "matmul_half_flop", "hbm_Bps", "gather_eff_max", "gather_half_row_bytes", "launch_s"):
        assert np.isfinite(rep["fitted"][key]) and rep["fitted"][key] > 0, key
    assert 0 < rep["fitted"]["gather_eff_max"] <= 1
    # the report: train and held-out errors for every kind
    for kind in ("memory", "matmul", "embedding", "step"):
        for part in ("train", "held_out"):
            e = rep["errors"][f"{kind}/{part}"]
            assert e["n"] >= 1 and 0 <= e["median"] <= e["p90"]
    ms = rep["measurements"]
    assert {m["split"] for m in ms} == {"train", "held_out"}
    assert all(m["measured_s"] > 0 and m["predicted_s"] > 0 for m in ms)
    # the fit went through the model: the training step lands within a factor 2 on this tiny grid
    steps = [m for m in ms if m["kind"] == "step" and m["split"] == "train"]
    assert steps and all(0.5 < m["predicted_s"] / m["measured_s"] < 2.0 for m in steps), steps
    assert csv.read_text().count("\n") == len(ms) + 1
    assert "held-out whole steps" in cal.format_report(rep)
    # evaluate takes it; a second calibration never overwrites it
    assert main(["evaluate", "--system", "mtia300-16", "--model", "dlrm-small", "--plan", "greedy", "--chip", str(out), "--json"]) == 0
    assert '"step_s"' in capsys.readouterr().out
    before = out.read_text()
    assert main(["calibrate", "--out", str(out), "--grid", "tiny"]) == 2
    assert "exists already" in capsys.readouterr().err and out.read_text() == before


def test_bad_requests_are_one_line_and_measure_nothing(tmp_path, capsys):
    assert main(["calibrate", "--device", "gpu7", "--out", str(tmp_path / "x.toml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "only 'local'" in err[0]
    assert main(["calibrate", "--out", str(tmp_path / "y.toml"), "--base", "tpu9"]) == 2
    assert "system family" in capsys.readouterr().err
    assert main(["calibrate", "--out", str(tmp_path / "no" / "z.toml")]) == 2
    assert "folder does not exist" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.toml"))


def test_rounds_keep_each_benchmark_fastest_round_on_a_cpu(monkeypatch):
    """`measure` passes over the grid `rounds` times; on a CPU a benchmark keeps its fastest round
    (a call is only ever slowed by other load) with the calls of every round counted."""
    runs = iter([[0.5, 3.0], [0.4, 5.0], [0.6, 4.0]])

    def once(grid, dtype, log, r, n):
        a, b = next(runs)
        return [cal.Measurement("memory", "m", {"bytes": 8.0}, a, 10, load_1min=float(r)),
                cal.Measurement("step", "s", {}, b, 3, load_1min=float(r))]
    monkeypatch.setattr(timing, "_measure_once", once)
    ms = cal.measure({"rounds": 3}, "fp32", log=lambda m: None)
    assert [(m.seconds, m.reps, m.load_1min) for m in ms] == [(0.4, 30, 1.0), (3.0, 9, 0.0)]
    assert timing._clock() is __import__("time").perf_counter      # wall time: see _clock


def test_recorded_measurements_refit_without_timing(tmp_path):
    """A CSV of write_measurements reads back with its split and every step's configuration (from
    its params, or for files written before they held it, from the grid entry of that name)."""
    c_new = (2, 16, 4, 512, (64,), (64,), "dot", 10_000)
    c_old = cal.GRIDS["default"]["step"][0]
    data = cal.step_dict(*c_new, "fp32")
    grid = dict(zip(("tables", "dim", "pooling", "batch", "bottom", "top", "interaction", "rows"),
                    (2, 16, 4, 512, [64], [64], "dot", 10_000)))
    ms = [cal.Measurement("memory", "stream", {"bytes": 1024.0}, 1e-5, 7, True, load_1min=1.5),
          cal.Measurement("step", data["name"], {"config": data, **grid}, 2e-3, 5, False),
          cal.Measurement("step", cal.step_dict(*c_old, "fp32")["name"], {}, 1e-3, 5, True)]
    path = tmp_path / "m.csv"
    cal.write_measurements(path, ms, "cpu (test)", "2026-01-01")
    back = cal.read_measurements(path)
    assert [(m.kind, m.seconds, m.reps, m.train) for m in back] == [(m.kind, m.seconds, m.reps, m.train) for m in ms]
    assert back[0].load_1min == 1.5 and np.isnan(back[1].load_1min)
    assert back[1].params["config"] == data
    assert back[2].params["config"] == cal.step_dict(*c_old, "fp32")
    llc = cal.local_llc_bytes()
    assert llc is None or llc >= 2**20
