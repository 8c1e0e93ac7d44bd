"""Access distributions: what a table's lookup distribution does to its embedding costs.

A table's ids follow a Zipf law over the N rows that are ever accessed (`access_zipf` s >= 0,
`access_distinct_rows` N; s = 0 is uniform access): the i-th most frequent row takes the share
p_i = i^-s / H(N, s) of the lookups, H(k, s) = sum_{i<=k} i^-s the generalized harmonic number.
Optionally a measured top-share curve (`access_top_fractions`, `access_top_share`: the share of
lookups the most frequent fraction f of the distinct rows take) replaces the law's mass where it is
known. A multi-hot expansion (`access_multi_hot` k, MLPerf's materialize_synthetic_multihot_dataset
with --multi_hot_distribution_type uniform) turns each drawn id r into k ids: r and k - 1 rows fixed
per r, drawn uniformly over the table's E rows; each expanded row carries its origin's frequency,
so the distribution over expanded rows is the same curve over about k times as many rows:

    ever-accessed rows  N' = E - (E - N) exp(-(k - 1) N / E)      (k N rows, less the uniform
                        extras' collisions with each other and with the drawn rows)
    distinct per batch  u  = E - (E - d) exp(-(k - 1) d / E),      d = distinct drawn ids among
                        n = B pooling / k draws (distinct_drawn)

Every function here is smooth in the model's and the plan's numbers and takes numpy or jax arrays
(cost.arrays.xp_of); those that depend on the model only are computed once per evaluation (vmap
over plans leaves them unbatched).
"""

from __future__ import annotations

import numpy as np

from .arrays import xp_of

# Gauss-Legendre nodes over log rank for the distinct-ids integral (distinct_drawn): the integrand
# is smooth on the scale of one e-fold of rank, and 24 nodes over ln N <= 28 (1e12 rows) keep the
# sum within 0.5 % of the direct sum (tests/test_access.py)
LN2 = float(np.log(2.0))     # a Python float: a numpy float64 would promote float32 arrays
_GL_X, _GL_W = np.polynomial.legendre.leggauss(24)     # float64; cast to the inputs' dtype where used


def harmonic(k, s):
    """H(k, s) = sum_{i=1}^{k} i^-s for real k >= 1: the first term exactly, the rest by
    Euler-Maclaurin from i = 2 (the integral, the two end terms and the first derivative correction),
        H ~ 1 + int_2^k x^-s dx + (2^-s + k^-s) / 2 + s (2^(-s-1) - k^(-s-1)) / 12     (k >= 2),
    int_2^k x^-s dx = 2^(1-s) ln(k/2) (e^u - 1) / u with u = (1 - s) ln(k/2), e^u = (k/2)^(1-s)
    (its series near u = 0); linear between H(1) = 1 and H(2) = 1 + 2^-s below two rows. Exact at
    k = 1, 2 and at s = 0; within 0.3 % of the direct sum for s <= 3 (tests/test_access.py). One
    log and one exp per value: the plan-dependent masses call it on every plan."""
    xp = xp_of(k, s)
    two_s = xp.exp(-s * LN2)                  # 2^-s (the model's, not the plan's)
    k2 = xp.maximum(k, 2.0)
    lk2 = xp.log(k2)
    ks = xp.exp(-s * lk2)                             # k^-s
    u = (1.0 - s) * (lk2 - LN2)
    small = xp.abs(u) < 1e-3
    em1 = xp.where(small, 1.0 + u / 2.0 + u * u / 6.0, (ks * k2 / (2.0 * two_s) - 1.0) / xp.where(small, 1.0, u))
    tail = 2.0 * two_s * (lk2 - LN2) * em1 + 0.5 * (two_s + ks) + s * (0.5 * two_s - ks / k2) / 12.0
    return 1.0 + xp.where(k >= 2.0, tail, (k - 1.0) * two_s)


def zipf_mass(x, s, n_rows):
    """Share of lookups the most frequent fraction x of N rows take under Zipf(s):
    H(x N, s) / H(N, s), with H(k) = k below one row (a fraction of the top row)."""
    xp = xp_of(x, s, n_rows)
    k = xp.clip(x * n_rows, 0.0, n_rows)
    k1 = xp.maximum(k, 1.0)
    return harmonic(k1, s) * xp.minimum(k, 1.0) / harmonic(xp.maximum(n_rows, 1.0), s)


def top_mass(tb, x):
    """Share of a table's lookups that its most frequent fraction x of the ever-accessed rows take:
    the Zipf mass (zipf_mass over access_distinct_rows) where no curve is known. Where the file gives
    a top-share curve (f_j, m_j): through its points, linear in ln x between them and on to (1, 1)
    (all rows take all lookups; a Zipf law with s near 1 has a mass near linear in ln x), and below
    the first point the Zipf mass scaled to meet it, z(x) m_1 / z(f_1). Non-decreasing in x either
    way (the loader holds the shares non-decreasing). [..., T] -> [..., T]. A multi-hot expansion
    leaves the curve as a function of the fraction unchanged (module docstring)."""
    xp = xp_of(x, tb.access_zipf)
    z = zipf_mass(x, tb.access_zipf, tb.access_distinct_rows)
    m = tb.access_top_frac.shape[-1]
    if m == 0:
        return z
    f, share, known = tb.access_top_frac, tb.access_top_share, tb.access_top_known
    z1 = zipf_mass(f[:, 0], tb.access_zipf, tb.access_distinct_rows)       # model-only
    lf = xp.log(f)
    knots_l = [lf[:, j] for j in range(m)] + [0.0 * lf[:, 0]]
    knots_m = [share[:, j] for j in range(m)] + [1.0 + 0.0 * share[:, 0]]
    lx = xp.log(xp.maximum(x, 1e-30))
    curve = knots_m[0]
    for j in range(m):
        span = xp.maximum(knots_l[j + 1] - knots_l[j], 1e-12)
        curve = curve + (knots_m[j + 1] - knots_m[j]) * xp.clip((lx - knots_l[j]) / span, 0.0, 1.0)
    head = z * (share[:, 0] / xp.maximum(z1, 1e-30))
    measured = xp.where(lx < knots_l[0], head, curve)
    return xp.minimum(xp.where(known > 0, measured, z), 1.0)


def expanded_rows(tb):
    """N': rows ever accessed after the multi-hot expansion (module docstring), [T]."""
    xp = xp_of(tb.rows)
    e, n, k = tb.rows, tb.access_distinct_rows, tb.access_multi_hot
    # n + (e - n)(1 - exp(-x)): as e - (e - n) exp(-x) it cancels to 0 in float32 where e >> n
    return n - (e - n) * xp.expm1(-(k - 1.0) * n / e)


def distinct_drawn(n, s, n_rows):
    """Expected distinct ids among n independent draws from Zipf(s) over N rows (the independent
    reference model, e.g. Che's approximation of LRU caches, Che et al., IEEE JSAC 2002, uses the
    same occupancy sum):
        d = sum_{i=1}^{N} (1 - exp(-n p_i)),  p_i = i^-s / H(N, s),
    by Euler-Maclaurin: the integral over the rank x in [1, N] (Gauss-Legendre in ln x, where the
    integrand is smooth) plus the two end terms. At s = 0 it is N (1 - exp(-n / N)), the uniform
    formula exactly; within 1 % of the direct sum for s <= 3 (tests/test_access.py)."""
    xp = xp_of(n, s, n_rows)
    n_rows = xp.maximum(n_rows, 1.0)
    a = n / harmonic(n_rows, s)                       # n p_1
    ln_n = xp.log(n_rows)
    nodes, weights = (xp.asarray(v, ln_n.dtype) for v in (_GL_X, _GL_W))   # float32 stays float32
    t = ln_n[..., None] * (0.5 * (nodes + 1.0))       # ln x at the nodes, [..., Q]
    g = lambda lx: -xp.expm1(-a[..., None] * xp.exp(-s[..., None] * lx))
    integral = 0.5 * ln_n * xp.sum(weights * g(t) * xp.exp(t), axis=-1)
    ends = -xp.expm1(-a) - xp.expm1(-a * xp.exp(-s * ln_n))
    return integral + 0.5 * ends


def distinct_per_batch(tb, global_batch):
    """u: distinct rows a step's lookups touch, per table [T] (the rows the backward scatter writes
    and the optimizer updates once each): the distinct drawn ids d among n = B pooling / k draws
    (distinct_drawn over access_distinct_rows), expanded by the multi-hot's k - 1 uniform extras per
    drawn id (module docstring), at most the table's rows. Uniform access without expansion gives
    rows (1 - exp(-B pooling / rows)), the uniform formula."""
    xp = xp_of(tb.rows)
    n = global_batch * tb.pooling / tb.access_multi_hot
    d = distinct_drawn(n, tb.access_zipf, tb.access_distinct_rows)
    e, k = tb.rows, tb.access_multi_hot
    return d - (e - d) * xp.expm1(-(k - 1.0) * d / e)        # expanded_rows' form, for the same reason


def hbm_cache_hit(tb, cache_ratio):
    """Hit rate of an HBM cache holding the fraction cache_ratio of a table's rows, most frequent
    first (TorchRec's fused_uvm_caching with load_factor = cache_ratio, an LFU-like cache in steady
    state): h = top_mass(cache_ratio) ** access_skew. With the defaults (s = 0, no curve) the mass
    is cache_ratio and h = cache_ratio ** access_skew, the legacy rule; a file gives access_skew or
    a distribution, not both (workload._parse_tables), so one of the two factors is the identity."""
    return top_mass(tb, cache_ratio) ** tb.access_skew


def llc_share(chip, tb, row_bytes, mass_hbm):
    """Share of the lookups served from device memory that the last-level cache serves: it holds the
    hottest C_t / row_bytes rows of those in HBM (C_t: the table's part of the cache, llc_bytes_of) (the top fraction cache_ratio c), so
        h = top_mass(min(C / row_bytes / N', c)) / top_mass(c) = min(1, top_mass(C / row_bytes / N') / top_mass(c))
    (the mass is increasing; mass_hbm = top_mass(c), computed once by the caller; the numerator
    depends on the model and the row width only, not on c). Under uniform access over all rows it is
    min(1, C / (c rows row_bytes)), compute.llc_hit's rule for the table's rows in HBM."""
    xp = xp_of(row_bytes, mass_hbm)
    rows = xp.maximum(expanded_rows(tb), 1.0)
    return xp.minimum(top_mass(tb, llc_bytes_of(chip, tb) / row_bytes / rows) / xp.maximum(mass_hbm, 1e-30), 1.0)


def llc_bytes_of(chip, tb):
    """[T] the last-level cache a table's hot rows hold: the tables' lookups run as one fused kernel
    (HugeCTR's embedding collection, FBGEMM's table-batched embedding), so they share the cache, each
    in proportion to its lookup traffic (pooling x dim). Model-wide, so every per-device sum stays
    linear in the placement: a device holding some of the tables gives them less of its cache than
    it would (an assumption on the safe side)."""
    xp = xp_of(tb.pooling, tb.dim)
    traffic = tb.pooling * tb.dim
    return chip.llc_bytes * traffic / xp.maximum(xp.sum(traffic, axis=-1, keepdims=True), 1e-30)


def llc_time_factor(chip, h):
    """Time of traffic a share h of which hits the last-level cache, relative to all from HBM:
    h B_hbm e_hbm / B_llc + (1 - h), B_llc = max(llc_Bps, B_hbm e_hbm) (compute.llc_factor's rule
    with the share given)."""
    hbm = chip.hbm_Bps * chip.hbm_eff
    return h * hbm / xp_of(chip.llc_Bps, hbm).maximum(chip.llc_Bps, hbm) + (1.0 - h)


def uniform(model):
    """The model with every table's access uniform over all its rows (no distribution, no
    expansion, access_skew 1): the traffic the model assumed before access distributions."""
    import dataclasses
    tb = model.tables
    xp = xp_of(tb.rows)
    t = tb.rows.shape[-1]
    flat = dataclasses.replace(
        tb, access_skew=xp.ones_like(tb.rows), access_zipf=xp.zeros_like(tb.rows), access_distinct_rows=tb.rows,
        access_multi_hot=xp.ones_like(tb.rows), access_top_frac=xp.zeros((t, 0), tb.rows.dtype),
        access_top_share=xp.zeros((t, 0), tb.rows.dtype), access_top_known=xp.zeros_like(tb.rows))
    return dataclasses.replace(model, tables=flat)
