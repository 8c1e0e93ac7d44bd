"""One cost model: relaxed plans run through the same code and converge to the hard result;
jit, vmap and grad all go through evaluate."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import perfmodel as pm
from conftest import breakdown_fn, grad_fn, step_fn, step_of
from perfmodel import cache


@pytest.fixture(scope="module")
def setup(mtia64, mlperf):
    plan = pm.default_plan(mtia64, mlperf)
    return mtia64, mlperf, plan, pm.to_arrays(plan, mtia64, mlperf)


def test_discrete_plan_and_its_one_hot_arrays_agree(setup):
    s, m, plan, pa = setup
    hard = pm.evaluate(s, m, plan)
    jitted = breakdown_fn("dlrm-dcnv2-mlperf")(s, pa)
    assert float(jitted.step_s) == pytest.approx(float(hard.step_s), rel=1e-6)
    np.testing.assert_allclose(np.asarray(jitted.memory_bytes), np.asarray(hard.memory_bytes), rtol=1e-6)


def test_relaxed_cost_converges_to_hard_as_temperature_falls(setup):
    s, m, plan, pa = setup
    hard = float(step_fn("dlrm-dcnv2-mlperf")(s, pa))
    errs = [abs(float(step_fn("dlrm-dcnv2-mlperf", t)(s, pa)) - hard) / hard for t in (0.1, 0.01, 0.001)]
    assert errs[0] > errs[1] > errs[2]
    assert errs[2] < 0.01


def test_soft_plan_is_continuous_at_one_hot(setup):
    """Blending the one-hot plan with a uniform one by eps moves the cost by O(eps): no jumps."""
    s, m, plan, pa = setup
    f = step_fn("dlrm-dcnv2-mlperf")
    hard = float(f(s, pa))
    def blend(eps):
        uni = jax.tree_util.tree_map(lambda x: jnp.full_like(x, 1.0 / x.shape[-1]) if x.ndim >= 1 else x, pa)
        mix = jax.tree_util.tree_map(lambda a, u: (1 - eps) * a + eps * u, pa, uni)
        return dataclasses.replace(mix, cw_shards=pa.cw_shards, cache_ratio=pa.cache_ratio)
    d1, d2, d3 = (abs(float(f(s, blend(e))) - hard) for e in (1e-2, 1e-3, 1e-4))
    # shrinks at least linearly with eps, twice over: no jump at 0 (the slope itself can be steep:
    # eps of a 40 M-row table made data-parallel all-reduces eps x its 20 GB gradient)
    assert d1 / d2 > 5.0 and d2 / d3 > 5.0 and d3 / hard < 0.05


def test_evaluate_inside_a_users_jit_and_vmap_equals_the_top_level_call(setup):
    """pm.evaluate compiles with perfmodel's XLA options (cache.jit), which jax allows on a top-level
    jit only; called under the user's jit or vmap it must still work and give the same figures."""
    s, m, plan, pa = setup
    top = pm.evaluate(s, m, pa)
    in_jit = jax.jit(lambda sv: pm.evaluate(sv, m, pa).step_s)(s)
    in_vmap = jax.vmap(lambda bw: pm.evaluate(dataclasses.replace(s, nic=dataclasses.replace(s.nic, port_Bps=bw)),
                                              m, pa).step_s)(jnp.stack([s.nic.port_Bps, s.nic.port_Bps]))
    assert float(in_jit) == pytest.approx(float(top.step_s), rel=1e-6)
    np.testing.assert_allclose(np.asarray(in_vmap), float(top.step_s), rtol=1e-6)


def test_vmap_over_plans_equals_one_at_a_time(mtia64, small):
    plans = pm.random_plans(jax.random.PRNGKey(3), mtia64, small, 8)
    f = step_fn("dlrm-small")
    batched = cache.jit(jax.vmap(step_of("dlrm-small"), in_axes=(None, 0)))(mtia64, plans)
    single = [float(f(mtia64, jax.tree_util.tree_map(lambda x: x[i], plans))) for i in range(8)]
    np.testing.assert_allclose(np.asarray(batched), single, rtol=1e-6)
    assert len(set(np.round(np.asarray(batched), 9))) > 1      # the plans differ, so do the times


def test_vmap_over_hardware_variants(mtia64, small):
    pa = pm.to_arrays(pm.default_plan(mtia64, small), mtia64, small)
    bws = jnp.asarray([25e9, 50e9, 100e9, 200e9])
    f = step_fn("dlrm-small")
    def at(bw):
        return f(dataclasses.replace(mtia64, nic=dataclasses.replace(mtia64.nic, port_Bps=bw)), pa)
    batched = np.asarray(jax.vmap(at)(bws))
    single = [float(at(b)) for b in bws]
    np.testing.assert_allclose(batched, single, rtol=1e-6)
    assert np.all(np.diff(batched) <= 0)


def test_gradient_wrt_hardware_matches_finite_differences(mtia64, mlperf):
    pa = pm.to_arrays(pm.default_plan(mtia64, mlperf), mtia64, mlperf)
    f = step_fn("dlrm-dcnv2-mlperf")
    g = grad_fn("dlrm-dcnv2-mlperf")(mtia64, pa)
    for part, leaf in (("chip", "hbm_Bps"), ("nic", "port_Bps"), ("chip", "peak_bf16_flops")):
        x = float(getattr(getattr(mtia64, part), leaf))
        def at(v):
            sub = dataclasses.replace(getattr(mtia64, part), **{leaf: jnp.float32(v)})
            return float(f(dataclasses.replace(mtia64, **{part: sub}), pa))
        h = 1e-3 * x
        fd = (at(x + h) - at(x - h)) / (2 * h)
        ad = float(getattr(getattr(g, part), leaf))
        assert ad == pytest.approx(fd, rel=0.05, abs=1e-3 * abs(float(f(mtia64, pa))) / x)


def test_gradient_wrt_relaxed_plan_is_finite_and_nonzero(mtia64, mlperf):
    pa = pm.to_arrays(pm.default_plan(mtia64, mlperf), mtia64, mlperf)
    g = cache.jit(jax.grad(step_of("dlrm-dcnv2-mlperf", 0.05), argnums=1))(mtia64, pa)
    for path, leaf in jax.tree_util.tree_leaves_with_path(g):
        assert np.all(np.isfinite(np.asarray(leaf))), jax.tree_util.keystr(path)
    assert float(jnp.abs(g.placement).sum()) > 0 and float(jnp.abs(g.a2a_precision).sum()) > 0
