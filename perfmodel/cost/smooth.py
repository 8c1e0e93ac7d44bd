"""Max and min that are exact at temperature 0 and smooth (log-sum-exp) above it.

The temperature is relative: tau = temperature x the mean magnitude of the arguments, so the
same temperature means the same sharpness for microseconds and seconds. It is a Python float
(static): the hard evaluation compiles to exact max/min.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from .arrays import xp_of


def _scale(x, temperature):
    return temperature * jax.lax.stop_gradient(jnp.mean(jnp.abs(x)) + 1e-12)


def smax(a, b, temperature: float = 0.0):
    if temperature == 0.0:
        return xp_of(a, b).maximum(a, b)
    a, b = jnp.broadcast_arrays(jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32))
    return reduce_max(jnp.stack([a, b]), 0, temperature)


def smin(a, b, temperature: float = 0.0):
    if temperature == 0.0 and xp_of(a, b) is np:
        return np.minimum(a, b)
    return -smax(-jnp.asarray(a), -jnp.asarray(b), temperature)


def hard_max(x, axis: int = -1):
    """jnp.max(x, axis), differentiated through its first maximum (_hard_max); np.max of numpy arrays."""
    if not isinstance(x, jax.Array):
        return np.max(x, axis=axis)
    return _hard_max(x, axis)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _hard_max(x, axis: int = -1):
    """jnp.max(x, axis), differentiated through its first maximum. jnp.max's own derivative shares the
    tangent among tied maxima: it turns the comparison with the maximum into floats, sums them and
    divides by the count. XLA's CPU backend with LLVM's optimizations off (cache.QUICK_COMPILE_OPTIONS)
    miscompiles that conversion inside perfmodel's larger vmapped gradients: counts of 0 and NaN
    derivatives (the relaxed step on dlrm-small / mtia300-16: 600 of its gradient's entries, on
    MLPerf / mtia300-64 the offload logit's; d step / d nic_split everywhere). A gather of the first
    maximum's tangent has no such conversion. The tangent is picked by a select against the first
    maximum's index and summed (the others are exact zeros): a gather there would transpose, in a
    gradient, to a scatter, which XLA:CPU runs element by element."""
    return jnp.max(x, axis=axis)


@_hard_max.defjvp
def _hard_max_jvp(axis, primals, tangents):
    (x,), (t,) = primals, tangents
    first = jnp.expand_dims(jnp.argmax(x, axis=axis), axis)
    pick = jax.lax.broadcasted_iota(first.dtype, x.shape, axis % x.ndim) == first
    return jnp.max(x, axis=axis), jnp.sum(jnp.where(pick, t, jnp.zeros((), t.dtype)), axis=axis)


def hard_min(x, axis: int = -1):
    """jnp.min(x, axis), differentiated through its first minimum (hard_max)."""
    return -hard_max(-x, axis)


def reduce_max(x, axis=-1, temperature: float = 0.0):
    if temperature == 0.0:
        return hard_max(x, axis)
    tau = _scale(x, temperature)
    return tau * logsumexp(x / tau, axis)


def logsumexp(z, axis=-1):
    """log sum exp(z) along `axis`, shifted by the largest term (no overflow). jax.nn.logsumexp
    computes the same but with its handling of infinities and weights traces ~5x the operations (its
    gradient more), which the relaxed step's compile pays at each of the schedule's ~20 maxima."""
    xp = xp_of(z)
    top = xp.max(z, axis=axis, keepdims=True)
    if xp is jnp:
        top = jax.lax.stop_gradient(top)
    return xp.squeeze(top, axis) + xp.log(xp.sum(xp.exp(z - top), axis=axis))
