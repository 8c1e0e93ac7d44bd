"""Constraints against a system and a model: the arrays the searches read (Limits, made by
`resolve`), and how far a plan is from keeping them (`violations` for plan arrays, `admissible` for
the search's table moves, `plan_violations` and `check_plan` for a discrete plan).

What a constraint set says is parsed and checked on its own in perfmodel.constraints (a model file
holds one); what it means for a plan is decided here, with the plan space's rules (space).
"""

from __future__ import annotations

import jax
import numpy as np

from ..config import ConfigError, fmt_bytes
from ..constraints import KEYS, TORCHREC_CACHE_LOAD_FACTOR, as_constraints, check_tables
from ..hardware import capacity_bytes
from .space import (CW, DP, MIN_CW_DIM, RW, SHARDING_TYPES, TOL, TW, TWRW, Limits, compute_kernel, cw_options,
                    make_masks, unlimited)


def resolve(constraints, system, model, src: str | None = None) -> Limits | None:
    """The Limits of `constraints` (anything as_constraints takes) on this system and model; None
    when there are none. Raises ConfigError naming the table and the constraint for an unknown
    table, a rank the system lacks, or a table no plan can satisfy."""
    c = as_constraints(constraints, src or "constraints")
    if not c.tables:                 # none, or only the plan-wide replicas / sync_every
        return None
    src = src or c.source
    names = model.tables.names
    T, D, L = len(names), system.num_chips, system.domain_size
    H = system.num_domains
    index = {n: i for i, n in enumerate(names)}
    check_tables(c, model.tables)
    lim = unlimited(T, D, H)
    dims = np.asarray(model.tables.dim).astype(int)
    size = np.asarray(model.tables.rows, np.float64) * np.asarray(model.tables.bytes_per_row(), np.float64)
    cap = float(capacity_bytes(system))
    for name, tc in c.tables.items():
        t, why = index[name], {}
        err = lambda key, msg: ConfigError(src, f"{name}.{key}", msg)
        if tc.sharding_types is not None:
            for j, st in enumerate(SHARDING_TYPES):
                if st not in tc.sharding_types:
                    lim.types[t, j] = 0.0
                    why[j] = "sharding_types"
        kernels = tc.compute_kernels
        if kernels is None and tc.cache_load_factor is not None:
            kernels = ("fused_uvm_caching",)
        if kernels is not None:
            if "dense" not in kernels:
                lim.types[t, DP], why[DP] = 0.0, why.get(DP, "compute_kernels")
            if "fused" not in kernels and "fused_uvm_caching" not in kernels:
                for j in (TW, CW, RW, TWRW):
                    lim.types[t, j], why[j] = 0.0, why.get(j, "compute_kernels")
            lim.fused[t] = 1.0 if "fused" in kernels else 0.0
            lim.caching[t] = 1.0 if "fused_uvm_caching" in kernels else 0.0
            lf = tc.cache_load_factor
            if lf is None and "fused" not in kernels:
                lf = TORCHREC_CACHE_LOAD_FACTOR
            if lf is not None:
                lim.cache_lo[t], lim.cache_hi[t] = (lf, lf) if isinstance(lf, float) else lf
        lim.min_dim[t] = tc.min_partition or MIN_CW_DIM
        lim.shards[t, 2:] = 0.0
        lim.shards[t, cw_options(int(dims[t]), D, tc.min_partition or 1, tc.max_cw_shards)] = 1.0
        if tc.ranks is not None:
            bad = [r for r in tc.ranks if r >= D]
            if bad:
                raise err("ranks", f"rank {bad[0]} does not exist: system {system.name} has ranks 0..{D - 1}")
            lim.devices[t] = 0.0
            lim.devices[t, list(tc.ranks)] = 1.0
            whole = np.minimum.reduceat(lim.devices[t], np.arange(0, D, L))   # domains all of whose ranks it may use
            lim.domains[t] = whole
            if len(tc.ranks) < D:
                for j in (RW, DP):
                    lim.types[t, j], why[j] = 0.0, why.get(j, "ranks")
            if not whole.any():
                lim.types[t, TWRW], why[TWRW] = 0.0, why.get(TWRW, "ranks")
            lim.shards[t, len(tc.ranks) + 1:] = 0.0
        _check_table(lim, t, name, dims[t], size[t], cap, D, L, tc, why, src)
    types = make_masks(system, model, limits=lim).types            # with what the model and system allow
    for name, tc in c.tables.items():
        t = index[name]
        if not (types[t] > -1).any():
            key = next(k for k in KEYS if getattr(tc, k) is not None)
            left = [st for j, st in enumerate(SHARDING_TYPES) if lim.types[t, j] > 0]
            raise ConfigError(src, f"{name}.{key}", f"leaves table {name!r} {', '.join(left)}, which it cannot take on "
                              f"system {system.name} (column_wise needs k | dim, 2 <= k, shards >= "
                              f"{int(lim.min_dim[t])} columns; table_row_wise two scale-up domains and a pooled "
                              "feature; one chip takes table_wise only)")
    return lim


def _check_table(lim, t, name, dim, size, cap, D, L, tc, why, src):
    """Refuse a table no plan can satisfy: no sharding type left, or none whose smallest shard fits
    the usable HBM of a device (cache ratio as the constraints allow)."""
    ks = [k for k in cw_options(int(dim), D, int(lim.min_dim[t])) if lim.shards[t, k] > 0]
    if not ks:
        lim.types[t, CW], why[CW] = 0.0, why.get(CW, "min_partition" if tc.min_partition else
                                                  "max_cw_shards" if tc.max_cw_shards else "ranks")
    if not lim.types[t].any():
        keys = sorted(set(why.values()))
        raise ConfigError(src, f"{name}.{keys[0]}", f"leaves table {name!r} no sharding type: " + "; ".join(
            f"{SHARDING_TYPES[j]} is ruled out by {k}" for j, k in sorted(why.items())))
    ratio = 1.0 if lim.fused[t] > 0 else float(lim.cache_lo[t])
    share = {TW: 1.0, CW: max(ks, default=1), RW: D, TWRW: L, DP: 1.0}
    per = {j: size * (ratio if j != DP else 1.0) / share[j] for j in range(5) if lim.types[t, j] > 0}
    j = min(per, key=per.get)
    if per[j] > cap:
        key = "ranks" if tc.ranks is not None else (tc.sharding_types and "sharding_types") or "compute_kernels"
        raise ConfigError(src, f"{name}.{key}", f"leaves table {name!r} ({fmt_bytes(size)}) no plan that fits: its "
                          f"smallest shard ({SHARDING_TYPES[j]}) needs {fmt_bytes(per[j])} of HBM, a device may use "
                          f"{fmt_bytes(cap)}")


# ---------------------------------------------------------------------------- checking a plan
def violations(pa, lim: Limits):
    """How far one-hot PlanArrays (a batch: leading axes) are from satisfying the limits: a sum over
    tables of the share of each that breaks one (0: satisfied). Numpy or jax arrays alike."""
    xp = np if isinstance(pa.shard_type, np.ndarray) else jax.numpy
    S = pa.shard_type
    placed = S[..., TW] + S[..., CW]
    if pa.row_shards is not None:        # row-wise over a subset: on the devices its placement holds
        placed = placed + S[..., RW] * xp.where(pa.row_shards < lim.devices.shape[-1] - 0.5, 1.0, 0.0)
    bad = xp.sum(S * (1.0 - lim.types), axis=-1)
    bad = bad + placed * xp.sum(pa.placement * (1.0 - lim.devices), axis=-1)
    bad = bad + S[..., TWRW] * xp.sum(pa.domain_placement * (1.0 - lim.domains), axis=-1)
    D = lim.shards.shape[-1] - 1
    k = xp.clip(xp.rint(pa.cw_shards), 0, D).astype(np.int32)
    k_ok = xp.take_along_axis(xp.broadcast_to(lim.shards, k.shape + (D + 1,)), k[..., None], axis=-1)[..., 0]
    bad = bad + S[..., CW] * (1.0 - k_ok)
    bad = bad + (1.0 - S[..., DP]) * (1.0 - lim.cache_allowed(pa.cache_ratio))
    return xp.sum(bad, axis=-1)


def admissible(lim: Limits | None, c: dict) -> tuple[dict, np.ndarray]:
    """The table moves c (columns t, st, devs, dom, k, cache: search.moves.COLUMNS; row-wise with
    k >= 1 is over the blocks of k devices from each of devs, with k = 0 over every device) that
    keep the limits, each cache ratio made one they allow (the nearest), and which rows those are."""
    keep = np.ones(len(c["t"]), bool)
    if lim is None:
        return c, keep
    t, st, cache = c["t"], c["st"], c["cache"]
    ok = lim.cache_allowed(cache, t) > 0
    cache = np.where(st == DP, 1.0, np.where(ok, cache, np.where(lim.caching[t] > 0,
                                                                 np.clip(cache, lim.cache_lo[t], lim.cache_hi[t]), 1.0)))
    devs = c["devs"]
    on = np.where(devs >= 0, lim.devices[t[:, None], np.maximum(devs, 0)] > 0, True).all(axis=1)
    subset = (st == RW) & (c["k"] >= 1)      # row-wise over the blocks of k devices from each of devs
    for i in np.flatnonzero(subset):
        on[i] = all((lim.devices[t[i], d:d + c["k"][i]] > 0).all() for d in devs[i] if d >= 0)
    keep = ((lim.types[t, st] > 0) & (on | ~(np.isin(st, (TW, CW)) | subset))
            & ((st != TWRW) | (lim.domains[t, c["dom"]] > 0)) & ((st != CW) | (lim.shards[t, c["k"]] > 0)))
    return {k: v[keep] for k, v in dict(c, cache=cache).items()}, keep


def plan_violations(plan, constraints, system, model, src: str = "plan") -> list[tuple[str, str]]:
    """Each (field, message) by which a discrete plan breaks the constraints, in table order."""
    c = as_constraints(constraints)
    check_tables(c, model.tables)
    out = []
    replicas, k = getattr(plan, "replicas", 1), getattr(plan, "sync_every", 1)
    if c.replicas is not None and replicas not in c.replicas:
        out.append(("replicas", f"is {replicas}; the constraint replicas allows {list(c.replicas)}"))
    if c.sync_every is not None and replicas > 1 and k > c.sync_every:
        out.append(("sync_every", f"is {k}; the constraint sync_every allows at most {c.sync_every}"))
    dims = {n: int(d) for n, d in zip(model.tables.names, np.asarray(model.tables.dim))}
    for name, tc in c.tables.items():
        t = plan.tables.get(name)
        if t is None:
            continue
        f = f"tables.{name}"
        st, k = t.sharding_type, len(t.ranks)
        kernel = compute_kernel(st, t.cache_ratio)
        kernels = tc.compute_kernels or (("fused_uvm_caching",) if tc.cache_load_factor is not None else None)
        if tc.sharding_types is not None and st not in tc.sharding_types:
            out.append((f + ".sharding_type", f"is {st}; its constraint sharding_types allows "
                        f"{', '.join(tc.sharding_types)}"))
        if kernels is not None and kernel not in kernels:
            out.append((f + ".cache_ratio", f"is {t.cache_ratio:g}, compute kernel {kernel}; its constraint "
                        f"compute_kernels allows {', '.join(kernels)}"))
        lf = tc.cache_load_factor
        if kernel == "fused_uvm_caching" and lf is not None:
            lo, hi = (lf, lf) if isinstance(lf, float) else lf
            if not lo - TOL <= t.cache_ratio <= hi + TOL:
                out.append((f + ".cache_ratio", f"is {t.cache_ratio:g}; its constraint cache_load_factor is {lf}"))
        if st == "column_wise":
            if tc.max_cw_shards is not None and k > tc.max_cw_shards:
                out.append((f + ".ranks", f"splits the table in {k} column-wise shards; max_cw_shards is "
                            f"{tc.max_cw_shards}"))
            if tc.min_partition is not None and dims[name] // k < tc.min_partition:
                out.append((f + ".ranks", f"makes column-wise shards {dims[name] // k} columns wide; min_partition "
                            f"is {tc.min_partition}"))
        if tc.ranks is not None and not set(t.ranks) <= set(tc.ranks):
            out.append((f + ".ranks", f"are {t.ranks}; its constraint ranks allows {list(tc.ranks)}"
                        + (f" ({st} spans every rank)" if st in ("row_wise", "data_parallel") else "")))
    return out


def check_plan(plan, constraints, system, model, src: str = "plan") -> None:
    """Raise ConfigError on the first constraint the plan breaks."""
    bad = plan_violations(plan, constraints, system, model, src)
    if bad:
        raise ConfigError(src, bad[0][0], bad[0][1] + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""))
