"""Elasticities by jax.grad against central finite differences, and their exact identities."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import perfmodel as pm
from perfmodel.analysis.leaves import leaf_info
from perfmodel.analysis.sensitivity import format_sensitivity, sensitivity
from perfmodel.analysis.table import columns

from conftest import step_fn

# on one xdist worker, with the CLI's sensitivity test: they differentiate dlrm-small on the same two
# systems, and the second test of a pair loads the gradient the first compiled instead of compiling
# it at the same time on the other worker
pytestmark = pytest.mark.xdist_group("sensitivity")

# leaves with sizeable, smooth effects at the presets (checked in both directions below); on h100-8 the
# collectives' HBM traffic leaves dlrm-small's compute headroom, so their HBM multiplier moves nothing
CHECKED = {
    "mtia300-16": ("chip.peak_bf16_flops", "chip.launch_s", "chip.hbm_Bps", "chip.gather_eff_max",
                   "nic.latency_s", "levels[0].latency_s", "offload.setup_s"),
    "h100-8": ("chip.peak_bf16_flops", "chip.hbm_Bps", "chip.scale_up_Bps", "chip.core_compute_fraction",
               "chip.gather_eff_max", "chip.matmul_half_flop"),
}


def _plan(system, model):
    """A cheap fixed plan: table i table-wise on rank i mod D."""
    D = system.num_chips
    return pm.Plan(tables={n: pm.TablePlan("table_wise", [i % D]) for i, n in enumerate(model.tables.names)},
                   offload=float(system.offload.engines) > 0, grad_buckets=4)


def _fd_elasticity(system, pa, index, h=3e-3):
    # a small step: +-1 % can cross a kink of the hard step time (here h100-8's HBM bandwidth moves
    # which device finishes its optimizer last), where a central difference averages two slopes
    leaves, tree = jax.tree_util.tree_flatten(system)
    f = step_fn("dlrm-small")
    x = float(leaves[index])

    def at(factor):
        ls = list(leaves)
        ls[index] = jnp.asarray(x * factor, jnp.float32)
        return float(f(jax.tree_util.tree_unflatten(tree, ls), pa))
    return (np.log(at(1 + h)) - np.log(at(1 - h))) / (np.log(1 + h) - np.log(1 - h))


@pytest.mark.parametrize("name", sorted(CHECKED))
def test_elasticities_match_finite_differences(name, small):
    system = pm.load_system(name)
    plan = _plan(system, small)
    pa = pm.to_arrays(plan, system, small)
    t = columns(sensitivity(system, small, plan))
    paths = [p for p, *_ in leaf_info(system)]
    assert sorted(t["path"]) == sorted(paths) and len(paths) == len(jax.tree_util.tree_leaves(system))
    assert np.all(np.diff(np.abs(t["elasticity"])) <= 1e-12)            # ranked by magnitude
    assert t["rank"][0] == 1 and list(t["rank"]) == list(range(1, len(paths) + 1))
    for path in CHECKED[name]:
        i = list(t["path"]).index(path)
        e = float(t["elasticity"][i])
        fd = _fd_elasticity(system, pa, paths.index(path))
        assert abs(e) > 1e-3, path                                       # a real effect, not 0 == 0
        assert e == pytest.approx(fd, rel=0.05, abs=1e-4), path
    # derivative per unit = elasticity x metric / value (in the unit shown)
    step = float(step_fn("dlrm-small")(system, pa))
    i = list(t["path"]).index("chip.hbm_Bps")
    assert t["unit"][i] == "GB/s" and t["value"][i] == pytest.approx(float(system.chip.hbm_Bps) / 1e9)
    assert t["derivative_per_unit"][i] == pytest.approx(t["elasticity"][i] * step / t["value"][i], rel=1e-4)
    assert t["knob"][i] == "hbm_bandwidth_GBps"


def test_cost_elasticities(small):
    """Cost per sample is step time x (chips x chip price + hosts x host price) / batch: its elasticities
    w.r.t. the two prices add up to 1, and every other parameter moves it as it moves the step time."""
    system = pm.load_system("h100-8")
    plan = _plan(system, small)
    step = columns(sensitivity(system, small, plan))
    cost = columns(sensitivity(system, small, plan, metric="usd_per_million_samples"))
    e_step = dict(zip(step["path"], step["elasticity"]))
    e_cost = dict(zip(cost["path"], cost["elasticity"]))
    assert e_cost["chip.usd_per_hour"] + e_cost["host_usd_per_hour"] == pytest.approx(1.0, rel=1e-4)
    for path, e in e_step.items():
        if path not in ("chip.usd_per_hour", "host_usd_per_hour"):
            assert e_cost[path] == pytest.approx(e, rel=1e-3, abs=1e-6), path
    assert cost["parameter"][0] == "chip price"


def test_format_and_bad_metric(small, mtia16):
    plan = _plan(mtia16, small)
    t = sensitivity(mtia16, small, plan)
    text = format_sensitivity(t, "step_s", top=5, title="x")
    lines = text.splitlines()
    assert lines[0] == "x" and "elasticity" in lines[2] and "given plan" in lines[3] and len(lines) == 4 + 1 + 5 + 1
    assert "peak bf16 compute" in text and "more parameters" in lines[-1]
    with pytest.raises(pm.ConfigError, match="metric.*allowed: step_s, usd_per_million_samples"):
        sensitivity(mtia16, small, plan, metric="latency")
    # preset names work as the objects do; another type is one error naming the argument
    assert format_sensitivity(sensitivity("mtia300-16", "dlrm-small", plan), "step_s", top=5, title="x") == text
    with pytest.raises(pm.ConfigError, match="field 'model': must be a RankingModel"):
        sensitivity(mtia16, 7, plan)


def test_replanned_differences_beside_the_fixed_plan(small, mtia16):
    """--replan: central differences of the re-searched step at x(1 +- h) for the top parameters with a knob.
    Peak compute moves no discrete choice of dlrm-small's plan on mtia300-16, so the re-searched elasticity
    agrees with the fixed-plan one (envelope theorem), sign included."""
    make = pm.planner("search", iterations=6)
    t = columns(sensitivity(mtia16, small, make, replan=2, h=0.05, executor="serial"))
    assert set(t["plan"]) == {make.label}
    done = [i for i, v in enumerate(t["replan_elasticity"]) if v is not None]
    assert len(done) == 2 and all(t["knob"][i] for i in done)
    from perfmodel.analysis.sensitivity import replanned_elasticities
    i = list(t["path"]).index("chip.peak_bf16_flops")
    e = float(t["elasticity"][i])
    fd, = replanned_elasticities(mtia16, small, [("peak_bf16_TFLOPs", float(t["value"][i]))], make, h=0.05,
                                 executor="serial")
    assert e < -0.05 and fd == pytest.approx(e, rel=0.1)
    text = format_sensitivity(t, "step_s", top=3)
    assert "re-searched" in text and "envelope theorem" in text and make.label in text
    with pytest.raises(pm.ConfigError, match="field 'replan'"):
        sensitivity(mtia16, small, make, replan=-1)
    with pytest.raises(pm.ConfigError, match="field 'h'"):
        sensitivity(mtia16, small, make, h=1.5)


@pytest.mark.parametrize("name", ["mtia300-16", "h100-16", "h100pcie-8", "a100roce-64"])
def test_every_parameter_has_a_users_name_and_unit(name):
    """No internal leaf path (chip.core_call_s) in the table: a leaf without its own entry takes the
    name, unit and scale of the config field that sets it."""
    system = pm.load_system(name)
    info = {p: (n, u, sc) for p, n, u, sc, _ in leaf_info(system)}
    assert all(n != p for p, (n, _, _) in info.items()), [p for p, (n, _, _) in info.items() if n == p]
    assert info["chip.core_call_s"] == ("fixed cost of one collective call", "us", 1e-6)
    assert info["nic.chunk_bytes"][1:] == ("KiB", 1024.0)
