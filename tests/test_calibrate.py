"""Calibration on the local device: the whole procedure on a tiny grid (measure in a subprocess,
fit through the model, hold out, write a chip preset), and the refusals a user can hit."""

import numpy as np
import pytest

import perfmodel as pm
from perfmodel import calibrate as cal
from perfmodel.cli import main
from test_presets import uncited


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    out = tmp_path_factory.mktemp("cal") / "my_chip.toml"
    csv = out.with_suffix(".csv")
    rep = cal.calibrate(out, grid="tiny", measurements_out=csv, command="pytest tests/test_calibrate.py",
                        log=lambda m: None)
    return out, csv, rep


def test_the_fitted_chip_is_a_valid_preset_with_sources(calibrated):
    out, _, rep = calibrated
    chip = pm.load_chip(out)
    assert chip.name == "my_chip"
    bad, checked = uncited(out.read_text())
    assert not bad and checked >= 30
    text = out.read_text()
    assert text.count("# source: calibrated") >= 6 and "pytest tests/test_calibrate.py" in text
    assert rep["device"] in text and rep["date"] in text
    for key in ("peak_fp32_flops", "matmul_half_flop", "hbm_Bps", "gather_eff_max", "gather_half_row_bytes", "launch_s"):
        assert np.isfinite(rep["fitted"][key]) and rep["fitted"][key] > 0, key
    assert 0 < rep["fitted"]["gather_eff_max"] <= 1


def test_report_has_held_out_errors_per_kind(calibrated):
    _, csv, rep = calibrated
    for kind in ("memory", "matmul", "embedding", "step"):
        for part in ("train", "held_out"):
            e = rep["errors"][f"{kind}/{part}"]
            assert e["n"] >= 1 and 0 <= e["median"] <= e["p90"]
    ms = rep["measurements"]
    assert {m["split"] for m in ms} == {"train", "held_out"}
    assert all(m["measured_s"] > 0 and m["predicted_s"] > 0 for m in ms)
    # the fit went through the model: training steps land within a factor 2 on this tiny grid
    steps = [m for m in ms if m["kind"] == "step" and m["split"] == "train"]
    assert all(0.5 < m["predicted_s"] / m["measured_s"] < 2.0 for m in steps), steps
    assert csv.read_text().count("\n") == len(ms) + 1
    assert "held-out whole steps" in cal.format_report(rep)


def test_evaluate_takes_the_calibrated_chip(calibrated, capsys):
    out, _, _ = calibrated
    assert main(["evaluate", "--system", "mtia300-16", "--model", "dlrm-small", "--chip", str(out), "--json"]) == 0
    assert '"step_s"' in capsys.readouterr().out


def test_never_overwrites_and_bad_requests_are_one_line(calibrated, capsys):
    out, _, _ = calibrated
    before = out.read_text()
    assert main(["calibrate", "--out", str(out), "--grid", "tiny"]) == 2
    assert "exists already" in capsys.readouterr().err and out.read_text() == before
    assert main(["calibrate", "--device", "gpu7", "--out", str(out.with_name("x.toml"))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "only 'local'" in err[0]
    assert main(["calibrate", "--out", str(out.with_name("y.toml")), "--base", "tpu9"]) == 2
    assert "system family" in capsys.readouterr().err
