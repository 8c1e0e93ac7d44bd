"""Attribution of a gap to factors: Shapley shares by hand, their sum, and the default factors read
from the presets."""

import itertools
from concurrent.futures import ThreadPoolExecutor

import pytest

import perfmodel as pm
from perfmodel.analysis.attribution import attribute, combinations, default_factors, moved, shapley


def test_shapley_by_hand():
    # T(none) 10, T(a) 6, T(b) 8, T(ab) 3 ms; a factor's worth is the time it saves
    T = {frozenset(): 10.0, frozenset("a"): 6.0, frozenset("b"): 8.0, frozenset("ab"): 3.0}
    phi = shapley({S: -t for S, t in T.items()}, "ab")
    assert phi["a"] == pytest.approx(0.5 * ((10 - 6) + (8 - 3)))       # 4.5: alone first, or after b
    assert phi["b"] == pytest.approx(0.5 * ((10 - 8) + (6 - 3)))       # 2.5
    # three players, an interaction: the shares still add up to T(none) - T(all), symmetric players share equally
    T3 = {frozenset(c): 9.0 - 2 * len(c) - (1.5 if {"x", "y"} <= set(c) else 0.0)
          for r in range(4) for c in itertools.combinations("xyz", r)}
    phi3 = shapley({S: -t for S, t in T3.items()}, "xyz")
    assert sum(phi3.values()) == pytest.approx(T3[frozenset()] - T3[frozenset("xyz")])
    assert phi3["x"] == pytest.approx(phi3["y"]) and phi3["x"] == pytest.approx(2.75) and phi3["z"] == pytest.approx(2.0)


def test_default_factors_come_from_the_presets(small):
    h100, mtia = pm.load_system("h100-8"), pm.load_system("mtia300-16")
    f = default_factors(h100, mtia, small)
    assert list(f) == ["integrated NIC", "message engines", "bandwidth split"]
    assert f["integrated NIC"] == {"nic_attach_pcie": float(mtia.nic.pcie)} and float(h100.nic.pcie) == 1.0
    assert f["message engines"] == {"offload_engines": int(mtia.offload.engines)}
    up, out = (float(x) for x in pm.link_bandwidths(mtia))          # MTIA 300's split of one NIC
    share = up / (up + out)
    split = f["bandwidth split"]
    total = float(h100.chip.scale_up_Bps + h100.nic.port_Bps * h100.nic.active_ports) / 1e9
    assert split["scale_up_bandwidth_GBps"] == pytest.approx(total * share, rel=1e-5)
    assert split["scale_up_bandwidth_GBps"] + split["scale_out_bandwidth_GBps"] == pytest.approx(total, rel=1e-5)
    # the other way round: MTIA 300 gets the H100's PCIe NIC, no engines, and its split on its own NIC
    back = default_factors(mtia, h100, small)
    assert back["PCIe NIC"] == {"nic_attach_pcie": 1.0} and back["message engines"] == {"offload_engines": 0}
    assert back["bandwidth split"]["nic_scale_up_fraction"] == pytest.approx(0.9, rel=1e-5)
    assert default_factors(h100, h100, small) == {}
    assert len(combinations(f)) == 8 and combinations(f)[-1][1] == {**f["integrated NIC"], **f["message engines"],
                                                                    **f["bandwidth split"]}


def test_two_factor_attribution_adds_up(small):
    """Reference = the system with both factors on: the shares add up to the whole gap and nothing is left."""
    h100 = pm.load_system("h100-8")
    factors = {"integrated NIC": {"nic_attach_pcie": 0}, "message engines": {"offload_engines": 16}}
    both = moved(h100, small, {"nic_attach_pcie": 0, "offload_engines": 16})[0]
    make = pm.planner("search", iterations=6)
    with ThreadPoolExecutor(2) as pool:          # the plans made on an executor: the same as made here
        a = attribute(h100, both, small, factors, plan=make, executor=pool)
    assert a.plan == make.label and set(a.steps_s) == {S for S, _ in combinations(factors)}
    for S, kv in combinations(factors):          # each combination is the searched plan's step on that hardware
        s, m = moved(h100, small, kv)
        assert a.steps_s[S] == pytest.approx(float(pm.evaluate(s, m, make(s, m)).step_s), rel=1e-6)
    assert sum(a.shares_s.values()) == pytest.approx(a.gap_s, rel=1e-6)
    assert a.rest_s == pytest.approx(0.0, abs=1e-12) and a.gap_s > 0
    text = a.format()
    assert "Shapley" in text and "integrated NIC" in text and "nic_attach_pcie 1 -> 0" in text
    d = a.to_dict()
    assert len(d["combinations"]) == 4 and d["shares_s"] == a.shares_s
    # the system's own plan, held by the caller, is the empty combination's: the same attribution
    held = attribute(h100, both, small, factors, plan=make, system_plan=make(h100, small), executor="serial")
    assert held.steps_s == a.steps_s and held.shares_s == a.shares_s
    other = attribute(h100, both, small, factors, plan=make, system_plan=pm.greedy_plan(h100, small), executor="serial")
    assert other.steps_s[frozenset()] == pytest.approx(float(pm.evaluate(h100, small, pm.greedy_plan(h100, small)).step_s))


def test_bad_factors(small):
    h100 = pm.load_system("h100-8")
    with pytest.raises(pm.ConfigError, match="field 'factors'.*at least one factor"):
        attribute(h100, h100, small, plan="greedy")                      # nothing differs by default
    with pytest.raises(pm.ConfigError, match="nic_scale_up_fraction"):
        attribute(h100, h100, small, {"split": {"nic_scale_up_fraction": 0.8}}, plan="greedy")
    with pytest.raises(pm.ConfigError, match="more than one factor"):
        attribute(h100, h100, small, {"a": {"offload_engines": 16}, "b": {"offload_engines": 8}}, plan="greedy")
