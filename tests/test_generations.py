"""Machines the fit never saw: leave one generation out (validate/steps.py), the model error fitted by
chip family (uncertainty/modelerror.py, propagate.ModelError) and its checks, on small synthetic
inputs with numbers worked by hand."""

import hashlib
import json
import math

import numpy as np
import pytest

import perfmodel as pm
from perfmodel.cli import main
from perfmodel.config import ConfigError
from perfmodel.hardware import architecture
from perfmodel.uncertainty import modelerror as ME
from perfmodel.uncertainty.propagate import MODEL_ERROR_FILE, ModelError, error_draws, load_model_error
from perfmodel.validate.steps import bias, held_out_folds


# ----------------------------------------------------------------------- leave one generation out

def test_folds_leave_each_group_out_and_skip_a_lone_group():
    folds = held_out_folds(["ampere", "hopper", "hopper", "ampere"])
    assert folds == {"ampere": ([1, 2], [0, 3]), "hopper": ([0, 3], [1, 2])}
    assert held_out_folds(["hopper", "hopper"]) == {}          # nothing else to fit on


def test_bias_is_the_signed_mean_log_error():
    # ln 1.1 + ln 0.9 = ln 0.99: the geometric mean ratio sqrt(0.99)
    assert bias([1.1, 0.9], [1.0, 1.0]) == pytest.approx(math.sqrt(0.99) - 1)
    assert bias([0.8, 0.8], [1.0, 1.0]) == pytest.approx(-0.2)       # too fast: negative
    assert bias([2.0], [1.0]) > 0


def test_the_presets_name_their_chips_architecture():
    assert architecture(pm.load_system("a100-8")) == "ampere"
    assert {architecture(pm.load_system(n)) for n in ("h100ib-8", "h100pcie-8", "h100hgx4-4")} == {"hopper"}
    assert architecture(pm.load_system("b200-8")) == "blackwell"
    assert architecture(pm.load_system("mtia300-64")) == "mtia"


# -------------------------------------------------------------------- the error, by family

def _rows(errors, families, sd=0.0, logo=None, systems=None):
    out = []
    for k, (e, f) in enumerate(zip(errors, families)):
        r = {"system": systems[k] if systems else f"s{k}", "family": f, "centered_log_error": e, "input_log_sd": sd}
        if logo is not None:
            r["logo_shift"] = logo[k]
        out.append(r)
    return out


def test_fit_by_family_by_hand():
    # A: errors 0.1, 0.3 (mean 0.2); B: -0.2, 0.0, -0.1 (mean -0.1). About their means: -0.1, 0.1,
    # -0.1, 0.1, 0: 0.04 over 5 - 2 degrees of freedom. At the other family's fit the errors are
    # e - shift: 0.2, 0.2, -0.2, 0, -0.1: mean square 0.13 / 5 = 0.026.
    rows = _rows([0.1, 0.3, -0.2, 0.0, -0.1], list("AABBB"), logo=[-0.1, 0.1, 0.0, 0.0, 0.0])
    me = ME.fit(rows)
    assert me.families == (("A", pytest.approx(0.2), 2), ("B", pytest.approx(-0.1), 3))
    assert me.mean == pytest.approx(0.02)
    assert me.residual_sigma == pytest.approx(math.sqrt(0.04 / 3)) == me.sigma
    assert me.transfer_sigma == pytest.approx(math.sqrt(0.026))
    # the inputs' own spread (0.05 at every row) is taken out of both
    me = ME.fit(_rows([0.1, 0.3, -0.2, 0.0, -0.1], list("AABBB"), sd=0.05, logo=[-0.1, 0.1, 0.0, 0.0, 0.0]))
    assert me.sigma == pytest.approx(math.sqrt(0.04 / 3 - 0.0025))
    assert me.transfer_sigma == pytest.approx(math.sqrt(0.026 - 0.0025))


def test_without_a_generation_fold_the_bias_turns_into_spread():
    # one family, errors -0.1 and -0.3: no fold says how another generation errs, so a new family
    # gets the rms of the errors about 0, sqrt((0.01 + 0.09) / 2), not their mean as a shift
    me = ME.fit(_rows([-0.1, -0.3], ["A", "A"]))
    assert me.transfer_sigma == pytest.approx(math.sqrt(0.05))
    assert me.spread("A") == (pytest.approx(-0.2), pytest.approx(math.sqrt(0.02)), 0.0)
    mean, within, between = me.spread("mtia")
    assert mean == 0.0 and math.hypot(within, between) == pytest.approx(math.sqrt(0.05))


def test_a_fitted_family_keeps_its_bias_and_another_draws_about_zero():
    me = ModelError(-0.1, 0.05, 0.05, 0.0, 9, (("hopper", -0.12, 7), ("ampere", -0.03, 2)), 0.13)
    u = np.array([0.5, 0.9])
    assert me.eps(u, "hopper")[0] == pytest.approx(-0.12)
    assert me.eps(u, "hopper")[1] == pytest.approx(-0.12 + 1.28155 * 0.05, abs=1e-5)
    assert me.eps(u, "blackwell")[0] == pytest.approx(0.0)
    assert me.eps(u, "blackwell")[1] == pytest.approx(1.28155 * 0.13, abs=1e-5)
    # a hand-built error with no families: every machine draws Normal(mean, sigma), as before
    plain = ModelError(0.1, 0.2, 0.2, 0.0, 1)
    assert plain.eps(np.array([0.5]), "anything")[0] == pytest.approx(0.1)


def test_error_draws_share_the_part_between_families():
    # two machine types of one unfitted family share its between-family part; with no spread
    # within a family they err alike draw by draw; a fitted family's machine draws its own mean
    me = ModelError(0.0, 0.0, 0.0, 0.0, 3, (("hopper", 0.1, 3),), 0.2)
    rng = np.random.default_rng(0)
    u = rng.uniform(0.01, 0.99, (500, 4))               # 3 groups + 1 unfitted family
    eps = error_draws(me, ["blackwell", "blackwell", "hopper"], u)
    assert np.allclose(eps[:, 0], eps[:, 1]) and np.allclose(eps[:, 2], 0.1)
    assert np.std(eps[:, 0]) == pytest.approx(0.2, rel=0.1)


def _spread_rows(errors, families, systems, logo):
    """Rows with no input spread: 64 samples all at 1 ms, the measured step exp(error) ms."""
    out = _rows(errors, families, 0.0, logo, systems)
    for r in out:
        r["log_samples"] = np.full(64, math.log(1e-3))
        r["measured_ms"] = math.exp(r["centered_log_error"])
        r["loso_shift"] = 0.0
    return out


def test_leave_one_generation_out_coverage_by_hand():
    # A's rows: errors -0.1, 0.1, their LOGO centres at -0.1 (transfer errors 0.0, 0.2); B's: 0.05,
    # 0.15, centres 0.0, 0.05 (transfer errors 0.05, 0.1). Holding A out: the error fitted on B alone
    # has sigma sqrt(2 x 0.05^2) = 0.071 within B and transfer sqrt((0.05^2 + 0.1^2) / 2) = 0.079, so
    # A's 80 % interval about its centre spans +-1.2816 x 0.079 = +-0.101: A's rows sit 0 and 0.2
    # from it, the first inside, the second not. Holding B out: A's sigma and transfer are both
    # sqrt(0.02) = 0.141, +-0.181: B's rows sit 0.05 and 0.1 from their centres, both inside.
    rows = _spread_rows([-0.1, 0.1, 0.05, 0.15], list("AABB"), ["a1", "a2", "b1", "b2"], [-0.1, -0.1, 0.0, 0.05])
    assert ME.logo_coverage(rows) == [True, False, True, True]
    # each system of a family held out in turn keeps its family's mean from the other system
    assert len(ME.loso_coverage(rows)) == 4


# ------------------------------------------------------------------------ the stored file

@pytest.mark.parametrize("patch, field", [
    ({"mean": float("nan")}, "mean"), ({"sigma": float("inf")}, "sigma"), ({"sigma": -0.1}, "sigma"),
    ({"residual_sigma": float("-inf")}, "residual_sigma"), ({"input_sigma": -1}, "input_sigma"),
    ({"rows": -3}, "rows"), ({"rows": 2.5}, "rows"), ({"rows": "9"}, "rows"), ({"transfer_sigma": float("nan")}, "transfer_sigma"),
    ({"families": [{"family": "hopper", "mean": 0.0, "rows": -1}]}, "families[0].rows"),
    ({"families": [{"family": "hopper", "mean": float("nan"), "rows": 1}]}, "families[0].mean"),
])
def test_a_model_error_file_with_a_bad_number_is_refused(tmp_path, patch, field):
    good = {"mean": -0.1, "sigma": 0.02, "residual_sigma": 0.09, "input_sigma": 0.09, "rows": 9,
            "transfer_sigma": 0.1, "families": [{"family": "hopper", "mean": -0.1, "rows": 7}]}
    p = tmp_path / "me.json"
    p.write_text(json.dumps({**good, **patch}))           # json writes NaN and Infinity as Python reads them
    with pytest.raises(ConfigError) as e:
        load_model_error(p)
    assert e.value.field == field and str(p) in str(e.value)
    p.write_text(json.dumps(good))
    assert load_model_error(p).families == (("hopper", -0.1, 7),)


def test_the_shipped_model_error_loads():
    me = load_model_error()
    assert me.rows > 0 and me.sigma >= 0


def test_refitting_writes_a_new_file_and_never_the_packages(tmp_path, capsys):
    before = hashlib.sha256(MODEL_ERROR_FILE.read_bytes()).hexdigest()
    assert main(["uncertainty", "--fit-model-error"]) == 2
    assert "--out" in capsys.readouterr().err
    assert main(["uncertainty", "--fit-model-error", "--out", str(MODEL_ERROR_FILE)]) == 2
    assert "exists already" in capsys.readouterr().err
    taken = tmp_path / "taken.json"
    taken.write_text("{}")
    assert main(["uncertainty", "--fit-model-error", "--out", str(taken)]) == 2
    assert taken.read_text() == "{}"
    assert hashlib.sha256(MODEL_ERROR_FILE.read_bytes()).hexdigest() == before


def test_write_refuses_an_existing_file(tmp_path):
    me = ModelError(0.0, 0.1, 0.1, 0.0, 1, (("A", 0.0, 1),), 0.1)
    p = ME.write(me, [], tmp_path / "new.json")
    assert load_model_error(p) == me
    with pytest.raises(ConfigError, match="exists already"):
        ME.write(me, [], p)


def test_the_header_says_which_error_a_machine_draws():
    from perfmodel.uncertainty.propagate import Uncertain
    from perfmodel.uncertainty.report import compare_lines, header
    me = ModelError(-0.1, 0.0, 0.07, 0.09, 9, (("hopper", -0.056, 7), ("ampere", -0.2, 2)), 0.082)

    def fake(family, x):
        x = np.asarray(x, float)
        return Uncertain({"step_s": float(np.median(x)), "samples_per_s": float(1 / np.median(x))},
                         {"step_s": x, "samples_per_s": 1 / x}, [], me, np.zeros((len(x), 0)), np.zeros(len(x)),
                         family=family)
    assert "bias -5.4 %" in header(fake("hopper", [1.0, 2.0]))
    assert "none of mtia's family: no bias, spread 8.2 %" in header(fake("mtia", [1.0, 2.0]))
    both = compare_lines(["m", "h"], [fake("mtia", [1.0, 1.0]), fake("hopper", [2.0, 2.0])])[0]
    assert "ampere -18.1 %" in both and "any other family no bias, spread 8.2 %" in both
