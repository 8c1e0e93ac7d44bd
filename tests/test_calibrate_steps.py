"""`perfmodel calibrate --steps`: your own measured steps in, calibrated presets out. One small
problem (dlrm-small on one HGX H100 4-GPU board, HugeCTR's planner) keeps the compiles few."""

import csv
import io
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import perfmodel as pm
from perfmodel.calibrate import steps as cs
from perfmodel.cli import main
from perfmodel.config import ConfigError
from perfmodel.validate.steps import COLUMNS, PARAMETERS, scaled
from test_presets import uncited

SYSTEM, MODEL, BATCH = "h100hgx4-4", "dlrm-small", 8192
ROW = {"system": SYSTEM, "model": MODEL, "global_batch": str(BATCH), "dense_dtype": "bf16",
       "comm_precisions": "fp32,bf16", "in_network_reduction": "no",
       "plan_settings": "planner=hugectr:auto:7:0.008;overlap_chunks=1;dense=replicated", "ms_per_step": "1.0",
       "run": "a synthetic run", "source": "this test", "plan_source": "this test"}


def steps_csv(path, rows, columns=COLUMNS + ("plan_source",)):
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow(r)
    path.write_text(buf.getvalue())
    return path


@pytest.fixture(scope="module")
def modelled_ms(tmp_path_factory):
    """The step of the synthetic row's run plan with the presets as shipped, in ms."""
    (t,) = cs.read_targets(steps_csv(tmp_path_factory.mktemp("probe") / "probe.csv", [ROW]))
    return float(pm.evaluate(t.system, t.model, t.plan).step_s) * 1e3


@pytest.fixture(scope="module")
def calibrated(modelled_ms, tmp_path_factory):
    """A row measured 1.2 x slower than the model, calibrated: (report, its folder, its CSV)."""
    d = tmp_path_factory.mktemp("cal")
    path = steps_csv(d / "my_runs.csv", [{**ROW, "ms_per_step": f"{1.2 * modelled_ms:.6f}"}])
    rep = cs.calibrate_steps(path, d / "out", draws=16, date="2026-12-07", command="pytest calibrate")
    return rep, d / "out", path


def test_a_row_measured_1_2x_slower_is_matched_after(calibrated, modelled_ms):
    rep, out, _ = calibrated
    (row,) = rep["rows"]
    # before: the model is the row's step / 1.2 (hand: 1 / 1.2 - 1 = -16.7 %)
    assert row["before_ms"] == pytest.approx(modelled_ms, rel=1e-6)
    assert row["before_err"] == pytest.approx(1 / 1.2 - 1, abs=1e-5)
    # after: the written presets, loaded back, give the measured step
    assert abs(row["after_err"]) < 0.01
    # the fit slowed the model by 1.2 through its shared scales: no scale moves the other way
    s = rep["scales"]
    assert s["gemm"] <= 1 and s["gather"] <= 1 and s["latency"] >= 1
    assert min(s["gemm"], s["gather"], 1 / s["latency"]) < 0.97


def test_the_written_presets_are_the_fitted_system_and_cite_every_number(calibrated):
    rep, out, path = calibrated
    chip_file, system_file = out / "h100.chip.toml", out / f"{SYSTEM}.toml"
    assert sorted(rep["written"]) == sorted([str(chip_file), str(system_file)])
    cal = pm.load_system(system_file)
    # the system points at the written chip, and is the base system with exactly the fitted scales
    assert cal.files == (str(system_file), str(chip_file.resolve()))
    assert cal.num_chips == 4 and cal.chip.name == "h100-calibrated"
    theta = jnp.asarray([np.log(rep["scales"][p]) for p in PARAMETERS], jnp.float32)
    want = jax.tree_util.tree_leaves(scaled(pm.load_system(SYSTEM), theta))
    got = jax.tree_util.tree_leaves(cal)
    assert len(want) == len(got)
    for a, b in zip(want, got):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5)
    for f in (chip_file, system_file):
        text = f.read_text()
        bad, checked = uncited(text)
        assert not bad and checked > 5, bad
        fitted = [ln for ln in text.splitlines() if "fitted by perfmodel calibrate --steps on my_runs.csv row 2, 2026-12-07" in ln]
        assert fitted and all("_range" not in ln.split("=")[0] for ln in fitted)
    chip_text = chip_file.read_text()
    assert chip_text.count("# source: fitted by perfmodel calibrate") == 8      # gemm, gather and 6 of the chip's latencies (call_overhead_us among them)
    # one row: each fitted number's range is the base's moved by its scale (it holds the value)
    from perfmodel.uncertainty.inputs import inputs_of
    got = {i.field: i for i in inputs_of(cal) if i.file == str(chip_file.resolve())}
    g = got["memory.gather_efficiency_max"]
    assert g.provenance == "stated" and g.lo <= g.value <= g.hi
    base = {i.field: i for i in inputs_of(pm.load_system("h100hgx4-4")) if i.file.endswith("h100.toml")}
    b = base["memory.gather_efficiency_max"]
    assert b.provenance == "stated"
    assert g.lo == pytest.approx(b.lo * rep["scales"]["gather"], rel=1e-4)
    assert g.hi == pytest.approx(b.hi * rep["scales"]["gather"], rel=1e-4)


def test_the_calibrated_chip_goes_into_a_system_with_its_own_nics(calibrated):
    """A system's [nic] replaces the chip's NIC numbers, not their ranges: the chip's NIC ranges are
    relative, so they hold the system's values (h100p5's EFA: 2 us per message against the chip's 1)."""
    rep, out, _ = calibrated
    from perfmodel.uncertainty.inputs import inputs_of
    system = pm.load_system("h100p5-8", chip=out / "h100.chip.toml")
    base = float(pm.load_system("h100p5-8").chip.gather_eff_max)
    assert system.chip.gather_eff_max == pytest.approx(base * rep["scales"]["gather"], rel=1e-5)
    assert float(system.nic.per_message_s) == pytest.approx(float(pm.load_system("h100p5-8").nic.per_message_s), rel=1e-6)
    assert inputs_of(system)


def test_evaluate_and_its_uncertainty_take_the_written_system(calibrated, capsys):
    rep, out, _ = calibrated
    system = str(out / f"{SYSTEM}.toml")
    assert main(["evaluate", "--system", system, "--model", MODEL, "--plan", "greedy", "--uncertainty", "16",
                 "--json", "--quiet"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["system"] == "h100hgx4-calibrated-4"
    u = got["uncertainty"]
    assert u["step_s"]["p10"] <= u["step_s"]["p50"] <= u["step_s"]["p90"]
    assert "interval_after" in rep["rows"][0]


def test_a_calibrated_chip_draws_no_family_bias(calibrated):
    """The calibration moved the chip's numbers by what its family's bias is: the model's error on
    it is the spread within a family about 0, not the family's mean again."""
    from perfmodel.hardware import architecture
    from perfmodel.uncertainty.propagate import load_model_error
    rep, out, _ = calibrated
    cal = pm.load_system(out / f"{SYSTEM}.toml")
    assert architecture(pm.load_system(SYSTEM)) == "hopper" and architecture(cal) == "hopper+calibrated"
    me = load_model_error()
    assert me.spread("hopper")[0] != 0.0                    # the shipped fit has a Hopper bias
    assert me.spread(architecture(cal)) == (0.0, me.sigma, 0.0) and me.fitted(architecture(cal))
    assert 'calibrated = "my_runs.csv row 2, 2026-12-07"' in (out / "h100.chip.toml").read_text()


def test_a_calibration_never_replaces_a_file(calibrated, capsys):
    rep, out, path = calibrated
    before = {p.name: p.read_text() for p in out.iterdir()}
    assert main(["calibrate", "--steps", str(path), "--out", str(out), "--draws", "0", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "exists already" in err[0] and "h100.chip.toml" in err[0]
    assert {p.name: p.read_text() for p in out.iterdir()} == before
    # one of the two names taken is enough to refuse, and nothing is written beside it
    other = out.parent / "half"
    other.mkdir()
    (other / f"{SYSTEM}.toml").write_text("mine\n")
    assert main(["calibrate", "--steps", str(path), "--out", str(other), "--draws", "0", "--quiet"]) == 2
    assert "exists already" in capsys.readouterr().err
    assert sorted(p.name for p in other.iterdir()) == [f"{SYSTEM}.toml"] and (other / f"{SYSTEM}.toml").read_text() == "mine\n"


def _refused(tmp_path, capsys, rows=None, text=None, columns=COLUMNS + ("plan_source",), extra=()):
    path = tmp_path / "runs.csv"
    if text is not None:
        path.write_text(text)
    else:
        steps_csv(path, rows, columns)
    code = main(["calibrate", "--steps", str(path), "--out", str(tmp_path / "out"), "--draws", "0", *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert not (tmp_path / "out").exists()
    return err[0]


def test_bad_csvs_are_one_line_each(tmp_path, capsys, modelled_ms):
    assert "column is missing" in _refused(tmp_path, capsys, [ROW], columns=tuple(c for c in COLUMNS if c != "ms_per_step"))
    assert "ms_per_step" in _refused(tmp_path, capsys, [ROW], columns=tuple(c for c in COLUMNS if c != "ms_per_step"))
    assert "column is missing" in _refused(tmp_path, capsys, text="")
    assert "holds no rows" in _refused(tmp_path, capsys, [])
    assert "unknown system" in _refused(tmp_path, capsys, [{**ROW, "system": "tpu9-4"}])
    assert "names no planner" in _refused(tmp_path, capsys, [{**ROW, "plan_settings": "overlap_chunks=1"}])
    assert "must be a positive" in _refused(tmp_path, capsys, [{**ROW, "ms_per_step": "nan"}])
    # a run plan that does not fit the system's memory (the batch's activations on 4 chips)
    assert "does not fit" in _refused(tmp_path, capsys, [{**ROW, "global_batch": "100000000"}])
    assert "--grid" in _refused(tmp_path, capsys, [ROW], extra=("--grid", "tiny"))


def test_out_must_be_a_folder(tmp_path, capsys):
    path = steps_csv(tmp_path / "runs.csv", [ROW])
    (tmp_path / "afile").write_text("x")
    assert main(["calibrate", "--steps", str(path), "--out", str(tmp_path / "afile"), "--draws", "0"]) == 2
    assert "is a file" in capsys.readouterr().err
    assert main(["calibrate", "--steps", str(path), "--out", str(tmp_path / "no" / "d"), "--draws", "0"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_set_field_replaces_adds_and_ranges_by_hand():
    text = "name = \"x\"\n\n[compute]\na_us = 1.0   # assumed: old\na_us_range = [0.5, 2]  # assumed: old range\nb = 2  # source: kept\n"
    got = cs.set_field(text, "compute", "a_us", "3", "source: new", "[2, 4]", "source: new range")
    lines = got.splitlines()
    assert lines[3].startswith("a_us = 3") and lines[3].endswith("# source: new")
    assert lines[4].startswith("a_us_range = [2, 4]") and "old range" not in got
    assert lines[5] == "b = 2  # source: kept"
    got = cs.set_field(text, "compute", "c_us", "5", "source: added")            # a key the table lacks: at its end
    assert got.splitlines()[-1].startswith("c_us = 5") and "# source: added" in got.splitlines()[-1]
    got = cs.set_field(text, "nic", "latency_us", "1", "source: added")          # a table the file lacks
    assert got.splitlines()[-2:] == ["[nic]", got.splitlines()[-1]] and got.splitlines()[-1].startswith("latency_us = 1")
    got = cs.set_field(text, "", "name", "\"y\"", None)                          # comment kept (none here)
    assert got.splitlines()[0] == "name = \"y\""
    import tomllib
    assert tomllib.loads(cs.set_field(text, "compute", "a_us", "3", "source: new", None))["compute"] == {"a_us": 3, "b": 2}


def test_the_measuring_subprocess_never_replaces_its_output(tmp_path):
    from perfmodel.calibrate import measure_main
    out = tmp_path / "m.json"
    out.write_text("mine")
    with pytest.raises(ConfigError, match="exists already"):
        measure_main(["measure", "--grid", "tiny", "--out", str(out)])
    assert out.read_text() == "mine"
