"""Tests for perfmodel.generator: synthetic production-scale embedding tables."""

import inspect
import math
import tomllib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel import generator
from perfmodel.generator import synthetic_embeddings

MODELS = Path(__file__).resolve().parents[1] / "data" / "models"
PROD = dict(num_tables=856, total_params=5e10)  # the prod-856 preset's settings
KEYS = ("rows", "dim", "pooling", "access_skew", "names")


def _params(out):
    return sum(r * d for r, d in zip(out["rows"], out["dim"]))


def _top_decile_share(rows):
    rows = np.sort(np.asarray(rows))[::-1]
    return rows[: max(1, len(rows) // 10)].sum() / rows.sum()


def _ranks(x):
    return np.argsort(np.argsort(x))


def test_same_seed_gives_identical_output():
    assert synthetic_embeddings(seed=7, **PROD) == synthetic_embeddings(seed=7, **PROD)


def test_different_seeds_give_different_tables():
    a = synthetic_embeddings(seed=0, **PROD)
    b = synthetic_embeddings(seed=1, **PROD)
    for key in ("rows", "dim", "pooling", "access_skew"):
        assert a[key] != b[key], key


def test_output_is_plain_python_lists_of_the_right_types():
    out = synthetic_embeddings(seed=0, num_tables=5, total_params=1e8)
    assert set(out) == set(KEYS)
    assert all(type(out[k]) is list and len(out[k]) == 5 for k in KEYS)
    assert all(type(r) is int for r in out["rows"])
    assert all(type(d) is int for d in out["dim"])
    assert all(type(p) is float for p in out["pooling"])
    assert all(type(a) is float for a in out["access_skew"])
    assert out["names"] == ["t0", "t1", "t2", "t3", "t4"]


@pytest.mark.parametrize("seed", range(4))
def test_total_params_within_half_percent(seed):
    out = synthetic_embeddings(seed=seed, **PROD)
    assert _params(out) == pytest.approx(5e10, rel=0.005)


def test_total_params_met_when_many_tables_are_clipped():
    # The cap forces most of the mass onto the tables below it; the rescale
    # must iterate with clipping, not scale once.
    out = synthetic_embeddings(seed=3, num_tables=50, total_params=50 * 64 * 2e6,
                               dims=(64,), dim_weights=(1,), max_rows=3e6)
    assert _params(out) == pytest.approx(50 * 64 * 2e6, rel=0.005)
    assert max(out["rows"]) == 3_000_000
    assert sum(r == 3_000_000 for r in out["rows"]) > 5


@pytest.mark.parametrize("seed", range(4))
def test_heavy_tail_top_decile_holds_most_rows(seed):
    out = synthetic_embeddings(seed=seed, **PROD)
    assert _top_decile_share(out["rows"]) > 0.5
    # and the spread spans several decades, unlike a uniform draw
    assert max(out["rows"]) / np.median(out["rows"]) > 100


def test_rounding_error_of_small_tables_is_absorbed():
    # 10 tables of 1.4 rows each round to 1; the shortfall must be put back.
    out = synthetic_embeddings(seed=0, num_tables=10, total_params=10 * 64 * 1.4,
                               dims=(64,), dim_weights=(1,), min_rows=1, row_sigma=0.0)
    assert _params(out) == pytest.approx(10 * 64 * 1.4, rel=0.005)


def test_total_params_too_fine_for_integer_rows_raises():
    with pytest.raises(ValueError, match="total_params.*integer rows"):
        synthetic_embeddings(seed=0, num_tables=1, total_params=256 * 1.5,
                             dims=(256,), dim_weights=(1,), min_rows=1)


def test_row_sigma_zero_gives_no_tail():
    out = synthetic_embeddings(seed=0, num_tables=100, total_params=1e9,
                               dims=(100,), dim_weights=(1,), row_sigma=0.0)
    assert max(out["rows"]) - min(out["rows"]) <= 1


@pytest.mark.parametrize("seed,mean", [(0, 15.8), (1, 15.8), (2, 3.0), (3, 80.0)])
def test_pooling_mean_matches(seed, mean):
    out = synthetic_embeddings(seed=seed, **PROD, mean_pooling=mean)
    assert np.mean(out["pooling"]) == pytest.approx(mean, rel=0.15)


def test_default_mean_pooling_is_the_dlrm_datasets_figure():
    default = inspect.signature(synthetic_embeddings).parameters["mean_pooling"].default
    assert default == pytest.approx(887e6 / 65536 / 856, abs=0.05)


def test_larger_tables_pool_more_but_weakly():
    out = synthetic_embeddings(seed=0, **PROD)
    rho = np.corrcoef(_ranks(out["rows"]), _ranks(out["pooling"]))[0, 1]
    assert 0.1 < rho < 0.5


@pytest.mark.parametrize("seed", range(3))
def test_all_values_in_range(seed):
    kw = dict(min_rows=1000, max_rows=5e7, max_pooling=200, skew_range=(0.4, 0.9),
              dims=(16, 128), dim_weights=(1, 3))
    out = synthetic_embeddings(seed=seed, num_tables=300, total_params=3e10, **kw)
    assert all(1000 <= r <= 5e7 for r in out["rows"])
    assert set(out["dim"]) == {16, 128}
    assert all(1.0 <= p <= 200 for p in out["pooling"])
    assert all(0.4 <= a <= 0.9 for a in out["access_skew"])


def test_dim_weights_shape_the_mix():
    out = synthetic_embeddings(seed=0, num_tables=2000, total_params=1e10,
                               dims=(32, 256), dim_weights=(0.9, 0.1))
    share_32 = np.mean(np.asarray(out["dim"]) == 32)
    assert 0.85 < share_32 < 0.95


def test_unreachable_total_params_raises():
    with pytest.raises(ValueError, match="total_params.*unreachable"):
        synthetic_embeddings(seed=0, num_tables=10, total_params=1e3)  # < 100 rows each
    with pytest.raises(ValueError, match="total_params.*unreachable"):
        synthetic_embeddings(seed=0, num_tables=2, total_params=1e13, max_rows=1e6)


@pytest.mark.parametrize("kwargs,name", [
    (dict(seed=-1), "seed"),
    (dict(seed=1.5), "seed"),
    (dict(num_tables=0), "num_tables"),
    (dict(num_tables=2.0), "num_tables"),
    (dict(total_params=0), "total_params"),
    (dict(total_params=-5e9), "total_params"),
    (dict(total_params=math.nan), "total_params"),
    (dict(total_params=math.inf), "total_params"),
    (dict(dims=()), "dims"),
    (dict(dims=(0, 64)), "dims"),
    (dict(dim_weights=(0.5, 0.5)), "dim_weights"),
    (dict(dim_weights=(1, -1, 1, 1)), "dim_weights"),
    (dict(dim_weights=(0, 0, 0, 0)), "dim_weights"),
    (dict(min_rows=0), "min_rows"),
    (dict(min_rows=1000, max_rows=10), "max_rows"),
    (dict(row_sigma=-0.1), "row_sigma"),
    (dict(pooling_sigma=math.inf), "pooling_sigma"),
    (dict(mean_pooling=0.5), "mean_pooling"),
    (dict(mean_pooling=600), "mean_pooling"),
    (dict(max_pooling=0.5), "max_pooling"),
    (dict(skew_range=(0.0, 1.0)), "skew_range"),
    (dict(skew_range=(0.8, 0.5)), "skew_range"),
    (dict(skew_range=(0.5, 1.5)), "skew_range"),
    (dict(skew_range=(0.5,)), "skew_range"),
])
def test_bad_arguments_raise_naming_the_argument(kwargs, name):
    args = dict(seed=0, num_tables=10, total_params=1e9) | kwargs
    with pytest.raises(ValueError, match=name):
        synthetic_embeddings(**args)


def test_arguments_are_keyword_only():
    with pytest.raises(TypeError):
        synthetic_embeddings(0, 10, 1e9)


@pytest.mark.parametrize("path", sorted(MODELS.glob("*.toml")), ids=lambda p: p.stem)
def test_synthetic_presets_call_the_generator(path):
    doc = tomllib.loads(path.read_text())
    emb = doc["embeddings"]
    if "synthetic" not in emb:
        pytest.skip("explicit tables")
    kwargs = emb["synthetic"]
    assert set(kwargs) <= set(inspect.signature(synthetic_embeddings).parameters)
    assert not {"rows", "pooling", "dim"} & set(emb)
    out = synthetic_embeddings(**kwargs)
    assert len(out["rows"]) == kwargs["num_tables"]
    assert _params(out) == pytest.approx(kwargs["total_params"], rel=0.005)
    # The interaction's width is written into the preset from the generated
    # dims; it goes stale if the generator's draws change.
    layers = doc["dense"]["layers"]
    bottom_out = sum(l["widths"][-1] for l in layers if l["stage"] == "bottom")
    first_top = next(l for l in layers if l["stage"] == "top")
    width = first_top.get("width", first_top.get("input"))
    assert width == sum(out["dim"]) + bottom_out


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    num_tables=st.integers(1, 300),
    log10_params_per_table=st.floats(4.5, 10.0),
)
def test_property_any_reachable_request_is_met(seed, num_tables, log10_params_per_table):
    total = num_tables * 10**log10_params_per_table
    out = synthetic_embeddings(seed=seed, num_tables=num_tables, total_params=total)
    assert out == synthetic_embeddings(seed=seed, num_tables=num_tables, total_params=total)
    assert all(len(out[k]) == num_tables for k in KEYS)
    assert _params(out) == pytest.approx(total, rel=generator.PARAMS_RTOL)
    assert all(100 <= r <= 1e9 for r in out["rows"])
    assert set(out["dim"]) <= {32, 64, 128, 256}
    assert all(1.0 <= p <= 500 for p in out["pooling"])
    assert np.mean(out["pooling"]) == pytest.approx(15.8, rel=1e-6)
    assert all(0.3 <= a <= 1.0 for a in out["access_skew"])
