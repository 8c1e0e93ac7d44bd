"""Invariants of the step time (hypothesis): monotone in hardware, symmetric in device labels,
communication-free on one chip, better with more offload engines, finite gradients everywhere."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import perfmodel as pm
from conftest import breakdown_fn, grad_fn, step_fn

# leaves where more is better, and leaves where less is better
BETTER_UP = ["chip.peak_bf16_flops", "chip.peak_fp8_flops", "chip.peak_fp32_flops", "chip.hbm_Bps",
             "chip.hbm_eff", "chip.matmul_eff_max", "chip.gather_eff_max", "chip.scale_up_Bps",
             "chip.host_link_Bps", "chip.core_msgs_in_flight", "nic.port_Bps", "nic.pcie_Bps",
             "offload.clock_Hz", "offload.reduce_bytes_per_cycle_all_busy", "offload.msgs_per_engine"]
BETTER_DOWN = ["chip.launch_s", "chip.matmul_half_flop", "chip.gather_half_row_bytes", "chip.core_compute_fraction",
               "chip.core_hbm_mult", "chip.scale_up_latency_s", "nic.latency_s", "nic.per_message_s",
               "nic.pcie_latency_s", "offload.setup_s"]

PROFILE = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def scaled(system, path, factor):
    part, leaf = path.split(".")
    sub = getattr(system, part)
    return dataclasses.replace(system, **{part: dataclasses.replace(sub, **{leaf: getattr(sub, leaf) * factor})})


@pytest.fixture(scope="module")
def systems():
    return {"mtia": pm.load_system("mtia300-64"), "h100": pm.load_system("h100-64")}


@pytest.fixture(scope="module")
def plans(systems, small):
    return {k: pm.random_plans(jax.random.PRNGKey(1), s, small, 16) for k, s in systems.items()}


def _pick(plans, i):
    return jax.tree_util.tree_map(lambda x: x[i], plans)


@PROFILE
@given(which=st.sampled_from(["mtia", "h100"]), leaf=st.sampled_from(BETTER_UP + BETTER_DOWN),
       factor=st.floats(1.01, 8.0), i=st.integers(0, 15))
def test_better_hardware_never_slows_a_step(systems, plans, which, leaf, factor, i):
    f = step_fn("dlrm-small")
    s = systems[which]
    pa = _pick(plans[which], i)
    if leaf in ("chip.hbm_eff", "chip.matmul_eff_max", "chip.gather_eff_max"):
        factor = min(factor, 1.0 / float(getattr(s.chip, leaf.split(".")[1])))
    better = scaled(s, leaf, factor if leaf in BETTER_UP else 1.0 / factor)
    assert float(f(better, pa)) <= float(f(s, pa)) * (1 + 1e-5)


@PROFILE
@given(i=st.integers(0, 15), seed=st.integers(0, 2 ** 31 - 1))
def test_relabelling_devices_changes_nothing(systems, plans, small, i, seed):
    """Permuting racks, and devices inside each rack, leaves every figure unchanged."""
    s = systems["mtia"]
    pa = _pick(plans["mtia"], i)
    rng = np.random.default_rng(seed)
    H, L = 4, 16
    racks = rng.permutation(H)
    perm = np.concatenate([r * L + rng.permutation(L) for r in racks])
    relabelled = dataclasses.replace(pa, placement=pa.placement[:, perm], domain_placement=pa.domain_placement[:, racks])
    f = breakdown_fn("dlrm-small")
    a, b = f(s, pa), f(s, relabelled)
    assert float(b.step_s) == pytest.approx(float(a.step_s), rel=1e-5)
    np.testing.assert_allclose(np.sort(np.asarray(b.memory_bytes)), np.sort(np.asarray(a.memory_bytes)), rtol=1e-5)


def test_one_chip_has_no_communication(small):
    one = pm.load_system("h100-1")
    bd = pm.evaluate(one, small, pm.default_plan(one, small))
    for phase in ("input_dist", "output_dist", "grad_dist", "dense_sync"):
        assert float(bd.phase_s[phase][0]) == 0.0
    assert float(bd.comm_s) == 0.0
    assert float(bd.exposed_comm_s) == 0.0
    assert float(bd.step_s) == pytest.approx(float(bd.compute_s[0]), rel=1e-6)


def test_more_offload_engines_never_hurt(systems, small, mlperf):
    """The best of (on the engines, on the cores) never gets slower as engines are added."""
    s = systems["mtia"]
    plan = pm.default_plan(s, mlperf)
    f = step_fn("dlrm-dcnv2-mlperf")
    best = []
    for engines in (0, 1, 2, 4, 8, 16, 32, 64):
        se = dataclasses.replace(s, offload=dataclasses.replace(s.offload, engines=jnp.float32(engines)))
        steps = []
        for offload in (False, True):
            pa = pm.to_arrays(dataclasses.replace(plan, offload=offload), s, mlperf)
            steps.append(float(f(se, pa)))
        best.append(min(steps))
    assert all(b <= a * (1 + 1e-6) for a, b in zip(best, best[1:])), best
    assert best[-1] < best[0]                      # engines do buy something on this workload


@pytest.mark.parametrize("name", ["mtia300-64", "h100-64"])
def test_gradients_wrt_every_hardware_leaf_are_finite(name, mlperf):
    s = pm.load_system(name)
    pa = pm.to_arrays(pm.default_plan(s, mlperf), s, mlperf)
    grads = grad_fn("dlrm-dcnv2-mlperf")(s, pa)
    leaves = jax.tree_util.tree_leaves_with_path(grads)
    assert len(leaves) > 40
    for path, g in leaves:
        assert np.all(np.isfinite(np.asarray(g))), jax.tree_util.keystr(path)
    # step time falls with more scale-out bandwidth on a multi-rack system
    assert float(grads.nic.port_Bps) < 0.0
