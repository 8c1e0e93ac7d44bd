"""Which array library evaluates the cost model, and the few operations that differ between them.

The cost functions are one implementation with two array libraries: jax.numpy, traced (jit, vmap
over plans, grad), and numpy, which evaluates a batch of discrete plans at once with no program to
compile (the plan search's first plans in a process that has none compiled: search.local). In
numpy every plan-dependent array carries a leading batch axis [N, ...] where the traced code, under
vmap, sees one plan; the system's and the model's arrays carry none in either.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def xp_of(*xs):
    """jax.numpy when any of xs is a jax array (or a tracer), else numpy."""
    return jnp if any(isinstance(x, jax.Array) for x in xs) else np


def as_numpy(tree):
    """A pytree (System, RankingModel, PlanArrays) with numpy leaves, for the numpy evaluation."""
    return jax.tree_util.tree_map(np.asarray, tree)


def lead(x, like):
    """A per-plan scalar x against a per-plan array `like` of more axes: in numpy ([N] against
    [N, ...]) x with singleton axes after its batch axis, so that it broadcasts over `like`'s own
    axes; x itself otherwise (one plan's scalar, traced under vmap, broadcasts as it is)."""
    if isinstance(x, np.ndarray) and x.ndim:
        return x.reshape(x.shape + (1,) * (np.ndim(like) - x.ndim))
    return x


def add_at(x, index: tuple, y):
    """x with y added at x[..., *index], out of place (jax: x.at[..., *index].add(y))."""
    if isinstance(x, np.ndarray):
        out = x.copy()
        out[(Ellipsis,) + index] += y
        return out
    return x.at[(Ellipsis,) + index].add(y)
