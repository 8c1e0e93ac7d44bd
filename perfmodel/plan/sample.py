"""Random plans: the one sampler of the plan space, for the random and evolutionary searches (a
numpy generator, over a search's masks) and for users (`random_plans`, seeded by a jax key).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..config import ConfigError
from ..hardware import System
from ..workload import RankingModel
from .arrays import PlanArrays, build
from .space import CW, DP, PRECISIONS, Masks, make_masks

MAX_PLAN_ENTRIES = 2 ** 28    # random_plans' n x tables x devices: its placements stay within 1 GB of float32


def table_rows(rng: np.random.Generator, masks: Masks, t: np.ndarray, H: int) -> dict:
    """Fresh table rows (TABLE_FIELDS, each [len(t), ...]) for the tables t: a uniform allowed
    sharding type; table-wise on a uniform allowed device, column-wise on k of them (k the fewest
    shards allowed: 2 unless a constraint says otherwise); a uniform allowed domain; the cache ratio
    a fresh placement takes (space.Limits.target_cache)."""
    lim, n = masks.limits, len(t)
    pick = lambda ok: np.argmax(np.where(ok, rng.random(ok.shape, np.float32), -1.0), axis=-1)   # uniform in ok
    st = pick(np.asarray(masks.types)[t] > -1)
    k = np.where(st == CW, np.argmax(np.asarray(masks.shards)[t] > 0, axis=-1), 1)
    # k distinct devices among a table's allowed ones, uniformly: the i-th a uniform rank among the
    # allowed devices not yet taken (its rank among all of them: one more for each taken one at or
    # below it, in ascending order), in O(k^2) a row rather than a draw per device
    allowed = np.asarray(lim.devices) > 0
    count, devices = allowed.sum(axis=1)[t], np.argsort(~allowed, axis=1, kind="stable")[t]
    rows, placement = np.arange(n), np.zeros((n, allowed.shape[1]), np.float32)
    taken = np.zeros((n, 0), np.int64)
    for i in range(int(k.max(initial=1))):
        r = (rng.random(n) * np.maximum(count - i, 1)).astype(np.int64)
        for below in np.sort(taken, axis=1).T:
            r += r >= below
        on = i < k
        placement[rows[on], devices[rows[on], np.minimum(r[on], allowed.shape[1] - 1)]] = 1.0 / k[on]
        taken = np.concatenate([taken, r[:, None]], axis=1)
    return dict(shard_type=np.eye(5, dtype=np.float32)[st], placement=placement,
                domain_placement=np.eye(H, dtype=np.float32)[pick(np.asarray(lim.domains)[t] > 0)],
                cw_shards=k.astype(np.float32),
                cache_ratio=np.where(st == DP, 1.0, np.asarray(lim.target_cache())[t]).astype(np.float32))


def sample_plans(rng: np.random.Generator, masks: Masks, n: int) -> PlanArrays:
    """n random discrete plans (one-hot PlanArrays, numpy) over the choices `masks` allows:
    table_rows for every table, uniform allowed settings (buckets 1 ... 32 and chunks 1 ... 8 in
    powers of two; offload only where the chip has engines)."""
    m, T = masks, np.shape(masks.types)[0]
    flat = table_rows(rng, m, np.tile(np.arange(T), n), np.shape(m.limits.domains)[1])
    rows = {f: x.reshape((n, T) + x.shape[1:]) for f, x in flat.items()}
    one = lambda mask: np.eye(np.shape(mask)[-1], dtype=np.float32)[
        np.argmax(np.where(np.asarray(mask) > -1, rng.random((n,) + np.shape(mask)), -1.0), axis=-1)]
    return build(rows, dict(
        dense_mode=one(m.dense), algorithm=one(m.algos), a2a_precision=one(m.a2a), grad_precision=one(m.grad),
        offload=((rng.random(n) < 0.5) * float(np.asarray(m.engines))).astype(np.float32),
        pipeline=(rng.random(n) < 0.5).astype(np.float32),
        grad_buckets=(2.0 ** rng.integers(0, 6, n)).astype(np.float32),
        overlap_chunks=(2.0 ** rng.integers(0, 4, n)).astype(np.float32)))


def _check_key(key) -> None:
    """A jax PRNG key (jax.random.key(seed) or jax.random.PRNGKey(seed)), or one error naming it."""
    ok = isinstance(key, jax.Array) and (jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
                                         or (key.dtype == jnp.uint32 and key.shape == (2,)))
    if not ok:
        raise ConfigError("", "key", f"must be a jax random key (jax.random.key(seed)), got {type(key).__name__} "
                          f"{key!r:.60}")


def random_plans(key, system: System, model: RankingModel, n: int) -> PlanArrays:
    """`n` random one-hot plans (stacked PlanArrays of jax arrays) over the plan space
    (space.make_masks, every precision allowed): sample_plans, its draws seeded by `key`.
    Not memory-checked."""
    T, D = model.tables.count, system.num_chips
    most = max(1, MAX_PLAN_ENTRIES // (T * D))
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or not 1 <= n <= most:
        raise ConfigError("", "n", f"must be an integer from 1 to {most:,} (plans of {T} tables on {D} devices: "
                          f"at most {MAX_PLAN_ENTRIES:,} placement entries), got {n!r}")
    _check_key(key)
    rng = np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel())
    plans = sample_plans(rng, make_masks(system, model, precisions=PRECISIONS), int(n))
    return jax.tree_util.tree_map(jnp.asarray, plans)
