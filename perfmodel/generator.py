"""Seeded synthetic embedding-table statistics at production scale.

Meta's public DLRM traces (facebookresearch/dlrm_datasets: 856 tables, 887 M
indices for 65,536 samples) are too large to ship; `synthetic_embeddings`
draws tables with their aggregate shape instead: many tables, heavy-tailed
row counts and pooling factors, skewed access. numpy only, so the workload
layer can build models from it without touching JAX.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np

# Gaussian-copula correlation between log rows and log pooling.
# assumed: big ID tables (users, items, pages) also carry the long multi-hot
# histories, so larger tables tend to pool more; kept weak because many small
# tables (e.g. hashed cross features) pool heavily too.
ROWS_POOLING_RHO = 0.3

# Relative tolerance on sum(rows * dim) against total_params.
PARAMS_RTOL = 0.005


def synthetic_embeddings(
    *,
    seed: int,
    num_tables: int,
    total_params: float,
    dims: Sequence[int] = (32, 64, 128, 256),
    dim_weights: Sequence[float] = (0.2, 0.3, 0.3, 0.2),
    min_rows: float = 100,
    max_rows: float = 1e9,
    row_sigma: float = 2.0,
    mean_pooling: float = 15.8,
    pooling_sigma: float = 1.2,
    max_pooling: float = 500,
    skew_range: Sequence[float] = (0.3, 1.0),
) -> dict:
    """Draw `num_tables` embedding tables whose rows x dim sum to `total_params`.

    Distributions (one `numpy.random.default_rng(seed)` stream, so the same
    arguments give the same tables):

    - dim ~ Categorical(dims, dim_weights), independent of everything else.
      assumed: the mix of widths in production models; no public per-table
      dims for dlrm_datasets.
    - rows = clip(s * exp(row_sigma * z_r), min_rows, max_rows), rounded to
      ints, with z_r ~ N(0, 1) and the scale s found by bisection so that
      sum(rows * dim) = total_params (within 0.5 %, re-clipping at each step).
      Lognormal with sigma 2 puts roughly three quarters of the rows in the
      top 10 % of tables: the heavy tail of Meta's dlrm_datasets traces.
      assumed: lognormal shape and sigma; the public traces give no fit.
    - pooling = clip(c * exp(pooling_sigma * z_p), 1, max_pooling), with c
      found the same way so that the mean over tables is `mean_pooling`
      (default 887 M indices / 65,536 samples / 856 tables = 15.8, source:
      github.com/facebookresearch/dlrm_datasets). (z_r, z_p) is a Gaussian copula with
      correlation ROWS_POOLING_RHO = 0.3, so larger tables tend to pool more
      (Spearman rank correlation about 0.29). assumed: the correlation.
    - access_skew ~ Uniform(skew_range), independent: the exponent a in
      cache hit rate = cache_ratio ** a (1.0 = uniform access, smaller = a
      few hot rows take most lookups). assumed: range and independence;
      dlrm_datasets reuses each unique index ~6.9 times, i.e. skewed.

    Returns plain Python lists: rows (int), dim (int), pooling (float, mean
    lookups per sample, >= 1), access_skew (float), names ("t0", "t1", ...).
    Raises ValueError for invalid arguments, or when total_params cannot be
    reached with rows in [min_rows, max_rows] at the sampled dims.
    """
    dims_arr, p_dims = _validate(
        seed=seed, num_tables=num_tables, total_params=total_params, dims=dims,
        dim_weights=dim_weights, min_rows=min_rows, max_rows=max_rows,
        row_sigma=row_sigma, mean_pooling=mean_pooling,
        pooling_sigma=pooling_sigma, max_pooling=max_pooling,
        skew_range=skew_range,
    )
    rng = np.random.default_rng(seed)
    n = num_tables
    dim = rng.choice(dims_arr, size=n, p=p_dims)
    z_rows = rng.standard_normal(n)
    z_pool = (ROWS_POOLING_RHO * z_rows
              + math.sqrt(1.0 - ROWS_POOLING_RHO**2) * rng.standard_normal(n))
    skew = rng.uniform(skew_range[0], skew_range[1], size=n)

    rows = _integer_rows(
        row_sigma * z_rows, dim, float(total_params),
        math.ceil(min_rows), math.floor(max_rows),
    )
    pooling = _scale_to_sum(
        pooling_sigma * z_pool, np.ones(n), mean_pooling * n,
        1.0, float(max_pooling),
    )
    return {
        "rows": [int(r) for r in rows],
        "dim": [int(d) for d in dim],
        "pooling": [float(p) for p in pooling],
        "access_skew": [float(a) for a in skew],
        "names": [f"t{i}" for i in range(n)],
    }


def _scale_to_sum(log_raw, weight, target, lo, hi, iters=200):
    """clip(s * exp(log_raw), lo, hi) with s such that sum(weight * that) = target.

    The sum is monotone in s, so bisect on log s between "all at lo" and
    "all at hi" (re-clipping at every step); the caller has checked that
    target lies between those. Works in logs so no draw overflows.
    """
    log_clip = (math.log(lo), math.log(hi))

    def values(log_s):
        return np.exp(np.clip(log_s + log_raw, *log_clip))

    log_s_lo = log_clip[0] - float(log_raw.max())
    log_s_hi = log_clip[1] - float(log_raw.min())
    for _ in range(iters):
        mid = 0.5 * (log_s_lo + log_s_hi)
        if float(np.sum(weight * values(mid))) < target:
            log_s_lo = mid
        else:
            log_s_hi = mid
    return values(0.5 * (log_s_lo + log_s_hi))


def _integer_rows(log_raw, dim, total_params, lo, hi):
    """Integer rows in [lo, hi] with sum(rows * dim) within PARAMS_RTOL of total_params."""
    dim_sum = int(dim.sum())
    if not lo * dim_sum <= total_params <= hi * dim_sum:
        raise ValueError(
            f"total_params={total_params:.6g} is unreachable: the sampled dims "
            f"sum to {dim_sum}, so rows in [min_rows, max_rows] = [{lo}, {hi}] give "
            f"between {lo * dim_sum:.6g} and {hi * dim_sum:.6g} parameters; "
            "change total_params, num_tables, min_rows or max_rows")
    rows = np.rint(_scale_to_sum(log_raw, dim, total_params, lo, hi)).astype(np.int64)
    # Rounding leaves up to sum(dim) / 2 params of error; put it back on the
    # largest table, within its bounds (it matters only for tiny tables).
    residual = total_params - float(np.sum(rows * dim))
    i = int(np.argmax(rows))
    rows[i] = int(np.clip(rows[i] + round(residual / dim[i]), lo, hi))
    got = float(np.sum(rows * dim))
    if abs(got - total_params) > PARAMS_RTOL * total_params:
        raise ValueError(
            f"total_params={total_params:.6g} cannot be met within "
            f"{PARAMS_RTOL:.1%} with integer rows (got {got:.6g}); "
            "raise total_params or min_rows")
    return rows


def _validate(*, seed, num_tables, total_params, dims, dim_weights, min_rows,
              max_rows, row_sigma, mean_pooling, pooling_sigma, max_pooling,
              skew_range):
    """Check the arguments of synthetic_embeddings; return dims and their probabilities."""
    def is_int(x):
        return isinstance(x, numbers.Integral) and not isinstance(x, bool)

    def is_real(x):
        return (isinstance(x, numbers.Real) and not isinstance(x, bool)
                and math.isfinite(x))

    if not is_int(seed) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if not is_int(num_tables) or num_tables < 1:
        raise ValueError(f"num_tables must be an integer >= 1, got {num_tables!r}")
    if not is_real(total_params) or total_params <= 0:
        raise ValueError(f"total_params must be a finite number > 0, got {total_params!r}")
    dim_list = _as_list(dims)
    if not dim_list or not all(is_int(d) and d >= 1 for d in dim_list):
        raise ValueError(f"dims must be a non-empty list of integers >= 1, got {dims!r}")
    weights = _as_list(dim_weights)
    if (weights is None or len(weights) != len(dim_list)
            or not all(is_real(w) and w >= 0 for w in weights) or sum(weights) <= 0):
        raise ValueError(
            f"dim_weights must be {len(dim_list)} non-negative numbers (one per dim) "
            f"with a positive sum, got {dim_weights!r}")
    if not is_real(min_rows) or min_rows < 1:
        raise ValueError(f"min_rows must be a number >= 1, got {min_rows!r}")
    if (not is_real(max_rows) or math.floor(max_rows) < math.ceil(min_rows)
            or max_rows > 2**62):
        raise ValueError(
            f"max_rows must be a number <= 2**62 with an integer in [min_rows, max_rows], "
            f"got min_rows={min_rows!r}, max_rows={max_rows!r}")
    for name, value in (("row_sigma", row_sigma), ("pooling_sigma", pooling_sigma)):
        if not is_real(value) or value < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if not is_real(max_pooling) or max_pooling < 1:
        raise ValueError(f"max_pooling must be a number >= 1, got {max_pooling!r}")
    if not is_real(mean_pooling) or not 1 <= mean_pooling <= max_pooling:
        raise ValueError(
            f"mean_pooling must lie in [1, max_pooling={max_pooling!r}], got {mean_pooling!r}")
    skew = _as_list(skew_range)
    if (skew is None or len(skew) != 2 or not all(is_real(a) for a in skew)
            or not 0 < skew[0] <= skew[1] <= 1):
        raise ValueError(
            f"skew_range must be (low, high) with 0 < low <= high <= 1, got {skew_range!r}")
    p = np.asarray(weights, dtype=float)
    return np.asarray(dim_list, dtype=np.int64), p / p.sum()


def _as_list(x):
    """x as a list if it is a non-string iterable (list, tuple, array), else None."""
    if isinstance(x, (str, bytes)):
        return None
    try:
        return list(x)
    except TypeError:
        return None
