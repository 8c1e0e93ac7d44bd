"""The schema's bounds hold what perfmodel/schema.py promises: every numeric field a preset has is
in the table, and anywhere within the bounds the model's figures are finite and positive in
float32 (hypothesis over each field's range, and the far corners with headroom for the largest
structures), with link_bandwidths exact and monotone over its inputs' whole ranges."""

import dataclasses
import tomllib
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import perfmodel as pm
from perfmodel.config import FLOAT32_MAX
from perfmodel.schema import (CHIP, MAX_CHIPS, MAX_GEMMS, MAX_TABLES, MODEL, MODEL_LEAVES, SYSTEM, SYSTEM_LEAVES)

DATA = Path(__file__).resolve().parents[1] / "data"


def _numeric(table: dict, prefix: str = ""):
    for key, value in table.items():
        if isinstance(value, dict):
            yield from _numeric(value, f"{prefix}{key}.")
        elif key.endswith("_range"):          # a field's uncertainty: the field it belongs to must exist
            yield f"{prefix}{key.removesuffix('_range')}"
        elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in
                 (value if isinstance(value, list) and value else [value])):
            yield f"{prefix}{key}"


def test_every_numeric_field_of_every_preset_has_a_schema_row():
    """One table: a field a preset gives is read with the schema's bounds (never a Num of its own)."""
    seen = 0
    for path in (DATA / "chips").glob("*.toml"):
        for name in _numeric(tomllib.loads(path.read_text())):
            assert name in CHIP, (path.name, name)
            seen += 1
    for path in (DATA / "systems").glob("*.toml"):
        data = tomllib.loads(path.read_text())
        assert all(name in SYSTEM for name in _numeric({k: v for k, v in data.items() if k not in ("network", "nic")}))
        assert all(name in CHIP for name in _numeric({"nic": data.get("nic", {})})), path.name   # the chip's NIC, overridden
        for level in data["network"]["levels"]:
            assert all(f"network.levels[].{k}" in SYSTEM for k in _numeric(level)), path.name
            seen += 1
    for path in (DATA / "models").glob("*.toml"):
        data = tomllib.loads(path.read_text())
        emb = {k: v for k, v in data["embeddings"].items() if k != "synthetic"}
        top = {k: v for k, v in data.items() if k not in ("embeddings", "dense")}
        assert all(n in MODEL for n in _numeric(top)) and all(f"embeddings.{n}" in MODEL for n in _numeric(emb))
        for layer in data["dense"]["layers"]:
            assert all(f"dense.layers[].{n}" in MODEL for n in _numeric(layer)), path.name
            seen += 1
    assert seen > 200


def test_rates_and_sizes_that_divide_have_a_positive_minimum():
    """A bandwidth, a peak or an efficiency of 0 (or one float32 rounds to 0) is a division by 0
    (the LLC's bandwidth is not: the model takes max(LLC, HBM))."""
    for f in (*CHIP.values(), *SYSTEM.values(), *MODEL.values()):
        divides = ("/s" in f.unit or "efficiency" in f.key or f.key in ("hbm_capacity_GB", "global_batch", "pooling")) \
            and f.key != "llc_bandwidth_GBps"
        if divides:
            assert f.lo > 0 and f.lo * f.scale > 1e-30, f.name
        assert f.hi * f.scale < FLOAT32_MAX / 1e12, f.name         # room for the products the model forms


# ------------------------------------------------------------------------------------- link_bandwidths

def _system(base: pm.System, xp, ports, port_Bps, pcie, pcie_Bps, fraction, shared) -> pm.System:
    f = (lambda x: np.float32(x)) if xp is np else (lambda x: jnp.float32(x))
    nic = dataclasses.replace(base.nic, active_ports=f(ports), port_Bps=f(port_Bps), pcie=f(pcie),
                              pcie_Bps=f(pcie_Bps), scale_up_fraction=f(fraction), serves_scale_up=shared)
    return base.replace(nic=nic)


def _bounds(f):
    return f.lo * f.scale, f.hi * f.scale


PORT, PCIE, FRACTION = _bounds(CHIP["nic.port_bandwidth_Gbps"]), _bounds(CHIP["nic.pcie_bandwidth_GBps"]), \
    (CHIP["nic.scale_up_fraction"].lo, CHIP["nic.scale_up_fraction"].hi)
log_uniform = lambda lo, hi: st.floats(np.log(lo), np.log(hi)).map(np.exp)
NIC = dict(ports=st.integers(1, int(CHIP["nic.active_ports"].hi)), port=log_uniform(*PORT),
           pcie=st.sampled_from([0.0, 1.0]) | st.floats(0.0, 1.0), pcie_bw=log_uniform(*PCIE),
           fraction=st.floats(*FRACTION), shared=st.booleans(), grow=st.floats(1.0, 1e6))


@pytest.mark.parametrize("xp", [np, jnp], ids=["numpy", "jax"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(**NIC)
# PCIe attachment near 1 with a small PCIe bandwidth: the sum is far below the NIC's total, whose float32
# rounding it carries
@example(ports=1, port=3584912846.1315913, pcie=0.9811138094839984, pcie_bw=1202604.2841647768, fraction=0.5,
         shared=True, grow=1.0)
def test_link_bandwidths_are_exact_and_monotone_over_the_whole_range(h100_64, xp, ports, port, pcie, pcie_bw,
                                                                     fraction, shared, grow):
    one = lambda *a: tuple(np.float64(np.asarray(x)) for x in pm.link_bandwidths(_system(h100_64, xp, *a)))
    up, out = one(ports, port, pcie, pcie_bw, fraction, shared)
    total = np.float32(np.float32(ports) * np.float32(port))
    capped = min(total, np.float32(pcie_bw))
    eff = (out + up) if shared else out
    assert np.isfinite([up, out]).all() and up > 0 and out > 0
    if pcie in (0.0, 1.0) and not shared:          # exact: the NIC's bandwidth, or the lesser of it and PCIe's
        assert out == (total if pcie == 0.0 else capped)
    # in float32 each term of a blend rounds to an ulp of the NIC's total, not of the blend
    ulps = 4 * float(np.finfo(np.float32).eps) * float(total)
    if shared:
        assert eff == pytest.approx(total * (1 - pcie) + pcie * capped, rel=1e-6, abs=ulps)
    # monotone: more NIC or PCIe bandwidth never lowers a link (both terms grow: exactly, in float32);
    # less PCIe attachment neither (one term grows, one shrinks: to float32 rounding)
    hi_port, hi_pcie = min(port * grow, PORT[1]), min(pcie_bw * grow, PCIE[1])
    for changed, tol, slack in (((ports, hi_port, pcie, pcie_bw, fraction, shared), 0.0, 0.0),
                                ((ports, port, pcie, hi_pcie, fraction, shared), 0.0, 0.0),
                                ((ports, port, pcie * 0.5, pcie_bw, fraction, shared), 1e-6, ulps)):
        up2, out2 = one(*changed)
        assert up2 >= up * (1 - tol) - slack and out2 >= out * (1 - tol) - slack, changed


# ------------------------------------------------------------------------------------- the whole model

def _set(obj, path: str, value):
    """obj with the leaf at dotted `path` (a 'levels[]' part: every level) set to `value`, shaped as it was."""
    head, _, rest = path.partition(".")
    if head.endswith("[]"):
        return dataclasses.replace(obj, **{head[:-2]: tuple(_set(o, rest, value) for o in getattr(obj, head[:-2]))})
    if rest:
        return dataclasses.replace(obj, **{head: _set(getattr(obj, head), rest, value)})
    return dataclasses.replace(obj, **{head: jnp.full(jnp.shape(getattr(obj, head)), value, jnp.float32)})


DENSE = ("dense.m", "dense.n", "dense.k")        # the lowered layer sizes: dense.layers[] fields, 1 to 1e6
LAYER = MODEL["dense.layers[].seq_len"]


def _at(system, model, where: dict) -> tuple:
    """The system and model with each schema leaf at `where[leaf]` in [0, 1]: its place between
    its bounds, log-uniform (linear for a bound of 0); the NIC's PCIe attachment at where['nic.pcie']."""
    def value(f, u):
        lo, hi = f.lo * f.scale, f.hi * f.scale
        return lo + u * (hi - lo) if lo == 0 else float(np.exp(np.log(lo) + u * (np.log(hi) - np.log(lo))))
    for path, f in SYSTEM_LEAVES.items():
        system = _set(system, path, value(f, where[path]))
    for path, f in {**MODEL_LEAVES, **{d: LAYER for d in DENSE}}.items():
        model = _set(model, path, value(f, where[path]))
    return _set(system, "nic.pcie", where["nic.pcie"]), model


LEAVES = (*SYSTEM_LEAVES, *MODEL_LEAVES, *DENSE, "nic.pcie")


@pytest.fixture(scope="module")
def problem(small):
    """h100-8 and dlrm-small under the default plan (test_cli's problem: one compiled evaluation
    serves both). Every leaf is a value, so one program covers the PCIe blend, offload engines
    from 0 to 1,024 and every size; the split of a NIC that carries scale-up is link_bandwidths'
    (tested above)."""
    system = pm.load_system("h100-8")
    return system, small, pm.to_arrays(pm.default_plan(system, small), system, small)


def _finite_and_positive(bd) -> None:
    for path, x in jax.tree_util.tree_leaves_with_path(bd):
        assert np.isfinite(np.asarray(x, np.float64)).all(), jax.tree_util.keystr(path)
    assert float(bd.step_s) > 0 and float(bd.samples_per_s) > 0
    assert np.all(np.asarray(bd.memory_bytes) > 0) and np.all(np.asarray(bd.compute_s) > 0)


corner_or_inside = st.sampled_from([0.0, 1.0]) | st.floats(0.0, 1.0)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=st.fixed_dictionaries({leaf: corner_or_inside for leaf in LEAVES}))
def test_anywhere_within_the_bounds_the_step_is_finite_and_positive(problem, where):
    system, model, pa = problem
    _finite_and_positive(pm.evaluate(*_at(system, model, where), pa))


# a leaf whose greatest value makes the step slowest (the others: their least)
SLOWEST_HIGH = ("latency", "launch", "setup", "per_message", "mult", "compute_fraction", "oversubscription",
                "half", "usd", "power", "rows", "dim", "pooling", "global_batch", "bytes", "skew", "dense.")


@pytest.mark.parametrize("slowest,tau", [(True, 0.0), (False, 0.0), (True, 0.02)],
                         ids=["slowest", "fastest", "slowest-smooth"])
def test_the_far_corners_leave_room_for_the_largest_structures(problem, slowest, tau):
    """At the slowest corner a step takes ~1e21 s on 8 tables, 12 GEMMs and 8 chips; scaled to
    MAX_TABLES tables, MAX_GEMMS GEMMs and MAX_CHIPS chips its cost figure still fits float32. The
    relaxed evaluation (a smooth max at temperature tau, the gradient search's) is finite there too."""
    system, model, pa = problem
    high = lambda leaf: leaf == "nic.pcie" or any(w in leaf for w in SLOWEST_HIGH)      # behind PCIe: capped
    where = {leaf: float(high(leaf) == slowest) for leaf in LEAVES}
    bd = pm.evaluate(*_at(system, model, where), pa, temperature=tau)
    _finite_and_positive(bd)
    growth = (MAX_TABLES / model.tables.count) * (MAX_GEMMS / len(model.dense.layer)) * (MAX_CHIPS / system.num_chips)
    for figure in (bd.step_s, bd.usd_per_million_samples, bd.joules_per_sample, np.max(bd.memory_bytes)):
        assert float(figure) * growth < FLOAT32_MAX
    if slowest:
        assert float(bd.step_s) > 1e15          # the corner is the slow one (the test would pass vacuously)


# ----------------------------------------------------------------- the configuration reference
def test_the_committed_configuration_reference_is_what_the_schema_generates():
    from perfmodel.cli.configdoc import markdown
    committed = (DATA.parent / "docs" / "configuration.md").read_text()
    assert committed == markdown(), "run `perfmodel schema --markdown docs/configuration.md` and commit it"


def test_every_key_a_loader_reads_from_a_preset_is_in_the_schema(monkeypatch):
    """Every key config.Section hands a loader while every bundled chip, system and model loads is a
    schema row (or a section that holds rows): a key read outside the schema is a test failure."""
    import re
    from perfmodel import config, schema
    read = set()
    get = config.Section._get

    def spy(self, key, *a, **kw):
        read.add((self.source, re.sub(r"\[\d+\]", "[]", self.prefix) + key))
        return get(self, key, *a, **kw)

    monkeypatch.setattr(config.Section, "_get", spy)
    for name in pm.model_names():
        pm.load_model(name)
    for family, sizes, _ in pm.presets.system_families():
        pm.load_system(f"{family}-{sizes[0]}")
    for chip in config.preset_names("chips"):
        pm.load_chip(chip)
    tables = {"/chips/": {**schema.CHIP, **schema.CHIP_OPTIONS}, "/systems/": {**schema.SYSTEM, **schema.SYSTEM_OPTIONS},
              "/models/": {**schema.MODEL, **schema.MODEL_OPTIONS}}
    kinds = set()
    for source, key in read:
        kind = next(k for k in tables if k in source)
        kinds.add(kind)
        rows = tables[kind]
        sections = {r.section for r in rows.values()}
        assert key in rows or any(s == key or s.startswith((key + ".", key + "[]")) for s in sections), (source, key)
    assert kinds == set(tables)


def test_plan_and_constraint_fields_are_the_schemas():
    from perfmodel.constraints import TableConstraint
    from perfmodel.schema import CONSTRAINT, PLAN
    plan = pm.Plan(tables={"t": pm.TablePlan("table_wise", [0])}, replicas=2).to_dict()   # a 2D plan writes every field
    assert set(plan) == {o.key for o in PLAN.values() if not o.section}
    assert set(plan["tables"]["t"]) == {o.key for o in PLAN.values() if o.section == "tables.<table>"}
    from perfmodel.constraints import Constraints
    assert [f.name for f in dataclasses.fields(TableConstraint)] == [o.key for o in CONSTRAINT.values()
                                                                     if o.section == "<table>"]
    plan_wide = [o.key for o in CONSTRAINT.values() if not o.section]
    assert plan_wide == ["replicas", "sync_every", "hold"] and all(f in {x.name for x in dataclasses.fields(Constraints)}
                                                            for f in plan_wide)
