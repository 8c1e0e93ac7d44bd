"""Access distributions (cost/access.py): the Zipf sums against direct sums, the uniform limits
against the formulas they replace, the loaders' checks, and what Criteo's profile does to an MLPerf
step."""

import dataclasses
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import perfmodel as pm
from perfmodel.config import ConfigError
from perfmodel.cost import access
from perfmodel.cost.embedding import table_seconds

DATA = Path(__file__).resolve().parents[1] / "data"


def zipf_weights(s, n):
    i = np.arange(1, n + 1, dtype=np.float64)
    return i ** -s


# ------------------------------------------------------------------------------- the sums

@pytest.mark.parametrize("s", [0.0, 0.5, 0.891, 1.0, 1.044, 1.5, 2.0, 3.0])
def test_harmonic_number_against_the_direct_sum(s):
    h = np.cumsum(zipf_weights(s, 100_000))
    for k in (1, 2, 3, 7, 100, 12_345, 100_000):
        assert access.harmonic(np.float64(k), np.float64(s)) == pytest.approx(h[k - 1], rel=3e-3)


def test_zipf_mass_of_the_top_rows_against_a_direct_sum():
    # a small table: 1,000 rows, s = 1.1; the top 10 and 100 rows' shares of the lookups by hand
    w = zipf_weights(1.1, 1000)
    for k in (10, 100, 1000):
        direct = w[:k].sum() / w.sum()
        assert access.zipf_mass(np.float64(k / 1000), np.float64(1.1), np.float64(1000)) == pytest.approx(direct, rel=3e-3)
    # uniform: the top fraction x takes x of the lookups
    assert access.zipf_mass(np.float64(0.25), np.float64(0.0), np.float64(1000)) == pytest.approx(0.25, rel=1e-12)


def test_distinct_ids_under_uniform_access_is_the_uniform_formula():
    rows = np.array([3.0, 1e3, 4e7, 4e7])
    n = np.array([10.0, 5e3, 6.5e6, 1e9])
    got = access.distinct_drawn(n, np.zeros(4), rows)
    np.testing.assert_allclose(got, rows * (1 - np.exp(-n / rows)), rtol=1e-9)


@pytest.mark.parametrize("s", [0.5, 1.044, 1.5, 2.0, 3.0])
def test_distinct_ids_under_zipf_against_the_direct_sum(s):
    w = zipf_weights(s, 200_000)
    p = w / w.sum()
    for n in (10.0, 1e3, 65536.0, 1e7):
        direct = np.sum(-np.expm1(-n * p))
        assert access.distinct_drawn(np.float64(n), np.float64(s), np.float64(2e5)) == pytest.approx(direct, rel=1e-2)


def test_multi_hot_expansion_multiplies_distinct_ids_until_the_table_fills():
    m = pm.load_model("dlrm-dcnv2-mlperf")
    tb = jax.tree_util.tree_map(np.asarray, m.tables)
    u = access.distinct_per_batch(tb, 65536.0)
    one = dataclasses.replace(tb, access_multi_hot=np.ones_like(tb.rows))
    d = access.distinct_drawn(65536.0 * tb.pooling / tb.access_multi_hot, tb.access_zipf, tb.access_distinct_rows)
    # table 20 (40 M rows, k = 100): the k - 1 extra ids of each distinct drawn id rarely collide
    assert u[20] == pytest.approx(100 * d[20], rel=0.03)
    # table 13 (2,209 rows, k = 6): the extras fill the table
    assert d[13] < u[13] <= tb.rows[13] and u[13] > 0.99 * tb.rows[13]
    # k = 1 is no expansion
    assert access.distinct_per_batch(one, 65536.0)[2] == pytest.approx(d[2], rel=1e-6)
    # the Criteo profile touches fewer rows per step than uniform access over all rows
    flat = access.distinct_per_batch(jax.tree_util.tree_map(np.asarray, access.uniform(m).tables), 65536.0)
    assert np.all(u <= flat * (1 + 1e-6))
    assert u[20] < 0.3 * flat[20]


# ------------------------------------------------------------------------------- caches

def test_hbm_cache_hit_is_monotone_and_whole_at_one(mlperf):
    tb = jax.tree_util.tree_map(np.asarray, mlperf.tables)
    c = np.linspace(0.01, 1.0, 100)[:, None] * np.ones(26)
    hit = access.hbm_cache_hit(tb, c)
    assert np.all(np.diff(hit, axis=0) >= -1e-7)
    np.testing.assert_allclose(hit[-1], 1.0, rtol=1e-6)
    # a skewed table's hottest tenth holds far more than a tenth of the lookups: with the measured
    # curve it passes through the profile's top-10 % share (table 0: 87.2 %)
    assert access.top_mass(tb, np.full(26, 0.10))[0] == pytest.approx(0.872, rel=1e-5)
    assert access.top_mass(tb, np.full(26, 0.01))[0] == pytest.approx(0.798, rel=1e-5)
    # uniform tables keep the legacy rule: hit = cache_ratio ** access_skew
    flat = jax.tree_util.tree_map(np.asarray, access.uniform(mlperf).tables)
    skewed = dataclasses.replace(flat, access_skew=np.full(26, 0.5))
    np.testing.assert_allclose(access.hbm_cache_hit(skewed, np.full(26, 0.25)), 0.5, rtol=1e-6)


def test_llc_share_under_uniform_access_is_the_working_set_rule(mtia64, mlperf):
    chip = jax.tree_util.tree_map(np.asarray, mtia64.chip)
    tb = jax.tree_util.tree_map(np.asarray, access.uniform(mlperf).tables)
    c, row = np.full(26, 0.5), 516.0
    h = access.llc_share(chip, tb, row, access.top_mass(tb, c))
    # each table holds its traffic's part of the 192 MB cache (the lookups run as one fused kernel)
    part = 192e6 * tb.pooling * tb.dim / np.sum(tb.pooling * tb.dim)
    np.testing.assert_allclose(access.llc_bytes_of(chip, tb), part, rtol=1e-6)
    np.testing.assert_allclose(h, np.minimum(1.0, part / (c * tb.rows * row)), rtol=1e-5)


def test_costs_agree_in_numpy_and_jax_and_are_differentiable(mtia64, mlperf):
    c = jnp.full(26, 0.5)
    fj, bj = table_seconds(mtia64.chip, mlperf, mlperf.tables.dim, c)
    npm = jax.tree_util.tree_map(np.asarray, mlperf)
    fn, bn = table_seconds(jax.tree_util.tree_map(np.asarray, mtia64.chip), npm, npm.tables.dim, np.asarray(c))
    np.testing.assert_allclose(np.asarray(fj), fn, rtol=1e-4)
    np.testing.assert_allclose(np.asarray(bj), bn, rtol=1e-4)

    def total(zipf, ratio):
        m = dataclasses.replace(mlperf, tables=dataclasses.replace(mlperf.tables, access_zipf=zipf))
        f, b = table_seconds(mtia64.chip, m, m.tables.dim, ratio)
        return jnp.sum(f + b)
    gz, gc = jax.grad(total, argnums=(0, 1))(mlperf.tables.access_zipf, c)
    assert np.all(np.isfinite(gz)) and np.all(np.isfinite(gc))
    assert np.all(np.asarray(gc) <= 0)           # more of a table in HBM is never slower


# ------------------------------------------------------------------------------- loaders

def edited(tmp_path, key, new):
    lines = (DATA / "models" / "dlrm-dcnv2-mlperf.toml").read_text().splitlines()
    hits = [i for i, line in enumerate(lines) if re.match(rf"{re.escape(key)}\s*=", line)]
    assert len(hits) == 1
    if new is None:
        del lines[hits[0]]
    else:
        lines[hits[0]] = new
    path = tmp_path / "bad-mlperf.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


ZIPF = [1.044, 1.225, 0.891, 1.468, 1.303, 0, 0.900, 1.217, 0, 1.052, 1.190, 1.170, 0, 1.158, 1.253, 0, 0, 1.890,
        0, 1.040, 1.095, 1.045, 1.138, 0.921, 0, 0]
SHARE = "[[0.798, 0.872], [0.699, 0.937], [0.426, 0.808], [0.880, 0.963], [0.825, 0.921], [], [0.400, 0.801], " \
        "[0.574, 0.896], [], [0.825, 0.904], [0.879, 0.965], [0.678, 0.931], [], [0.910, 0.971], [0.701, 0.942], [], " \
        "[], [0.900, 0.989], [], [0.793, 0.866], [0.856, 0.941], [0.807, 0.882], [0.882, 0.967], [0.439, 0.834], [], []]"


def _list(values, i, v):
    out = list(values)
    out[i] = v
    return "[" + ", ".join(str(x) for x in out) + "]"


BAD = [
    ("negative-exponent", "access_zipf", "access_zipf = " + _list(ZIPF, 3, -0.5), "embeddings.access_zipf[3]",
     [">= 0 and <= 10", "got -0.5"]),
    ("nan-exponent", "access_zipf", "access_zipf = " + _list(ZIPF, 0, "nan"), "embeddings.access_zipf[0]",
     ["a finite number", "got nan"]),
    ("exponent-lengths", "access_zipf", "access_zipf = [1.0, 1.1]", "embeddings.access_zipf",
     ["must have 26 entries (one per table)", "has 2"]),
    ("distinct-above-rows", "access_distinct_rows",
     "access_distinct_rows = " + _list([1] * 26, 1, 40000), "embeddings.access_distinct_rows[1]",
     ["more than the table's 39,060 rows", "<= rows"]),
    ("distinct-below-one", "access_distinct_rows", "access_distinct_rows = " + _list([1] * 26, 2, 0),
     "embeddings.access_distinct_rows[2]", ["an integer >= 1", "got 0"]),
    ("fractions-decreasing", "access_top_fractions", "access_top_fractions = [0.1, 0.01]",
     "embeddings.access_top_fractions", ["increasing, each a finite number >= 1e-06 and <= 1"]),
    ("fraction-above-one", "access_top_fractions", "access_top_fractions = [0.5, 1.5]",
     "embeddings.access_top_fractions[1]", ["<= 1", "got 1.5"]),
    ("curve-decreasing", "access_top_share", "access_top_share = " + SHARE.replace("[0.798, 0.872]", "[0.9, 0.8]"),
     "embeddings.access_top_share[0]", ["non-decreasing", "[0.9, 0.8]"]),
    ("curve-above-one", "access_top_share", "access_top_share = " + SHARE.replace("[0.699, 0.937]", "[0.7, 1.2]"),
     "embeddings.access_top_share[1]", ["each >= 0 and <= 1"]),
    ("curve-length", "access_top_share", "access_top_share = " + SHARE.replace("[0.426, 0.808]", "[0.426]"),
     "embeddings.access_top_share[2]", ["or 2 shares"]),
    ("curve-tables", "access_top_share", "access_top_share = [[0.5, 0.9]]", "embeddings.access_top_share",
     ["a list of 26 lists (one per table)"]),
    ("skew-with-a-distribution", "access_multi_hot",
     "access_skew = 0.5\naccess_multi_hot = [3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1]",
     "embeddings.access_skew", ["must not be given together with access_zipf", "legacy"]),
]


@pytest.mark.parametrize("key,new,field,pieces", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_distribution_that_is_not_one_gets_one_clear_error(tmp_path, key, new, field, pieces):
    path = edited(tmp_path, key, new)
    with pytest.raises(ConfigError) as info:
        pm.load_model(path)
    err = info.value
    assert "\n" not in str(err) and path.name in str(err)
    assert err.field == field, str(err)
    for piece in pieces:
        assert piece in str(err), f"{piece!r} not in {err}"


def test_the_defaults_are_uniform_access_over_all_rows():
    m = pm.load_model("dlrm-small")
    tb = m.tables
    assert np.all(np.asarray(tb.access_zipf) == 0) and np.all(np.asarray(tb.access_multi_hot) == 1)
    np.testing.assert_array_equal(np.asarray(tb.access_distinct_rows), np.asarray(tb.rows))
    assert tb.access_top_frac.shape == (tb.count, 0)


# ------------------------------------------------------------------------------- the step

def test_criteo_profile_speeds_the_mlperf_step_as_published(mlperf):
    """MLPerf DLRM-DCNv2 on 8 x B200 at the greedy plan, uniform ids against Criteo's profile with
    the multi-hot expansion: a public reproduction (docs/sources.md [criteo-profile]) measured 6.30 ms
    with uniform random ids, 4.33 ms with the Zipf fit and 4.08 ms with real Criteo, a ratio of 1.46
    to 1.54. Asserted: faster with Criteo's profile, by a ratio within 1.5 / 1.3 to 1.5 x 1.3. The
    tolerance is wide because the reproduction ran in an input-bound virtual machine with HugeCTR
    (its ratios only are meaningful; the batch-independent time it adds, about 0.4 - 0.5 ms, dilutes
    them), at HugeCTR's plan, not this one."""
    system = pm.load_system("b200-8")
    flat = access.uniform(mlperf)
    plan = pm.greedy_plan(system, flat)
    uniform_s = float(pm.evaluate(system, flat, plan).step_s)
    criteo_s = float(pm.evaluate(system, mlperf, plan).step_s)
    assert criteo_s < uniform_s
    assert 1.5 / 1.3 <= uniform_s / criteo_s <= 1.5 * 1.3, (uniform_s, criteo_s)
