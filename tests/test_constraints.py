"""Per-table constraints: every search method's plan keeps them (a property test on a small
instance), a request no plan can satisfy gets one clear error naming the table and the constraint,
TorchRec ParameterConstraints are read by attribute, and files (a constraints file, a model file's
[constraints.<table>]) are schema-checked."""

import tomllib
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import perfmodel as pm
from perfmodel.cli import main
from perfmodel.constraints import Constraints, TableConstraint, as_constraints, from_torchrec
from perfmodel.plan import plan_violations, resolve
from perfmodel.plan import SHARDING_TYPES, compute_kernel
from perfmodel.search.instances import small_instance

METHODS = ("greedy", "random", "evolutionary", "exact", "gradient")


@pytest.fixture(scope="module")
def inst():
    return small_instance(0)        # 12 tables on 4 chips (one scale-up domain): shares compiles with test_search


def _error(fn, *needles):
    with pytest.raises(pm.ConfigError) as e:
        fn()
    for n in needles:
        assert n in str(e.value), (n, str(e.value))
    return str(e.value)


# ----------------------------------------------------------------------------- the property
@st.composite
def constraint_sets(draw, names, D):
    """A few tables each with a random subset of the constraints."""
    out = {}
    for name in draw(st.lists(st.sampled_from(names), min_size=1, max_size=4, unique=True)):
        c = {}
        if draw(st.booleans()):
            c["sharding_types"] = draw(st.lists(st.sampled_from(SHARDING_TYPES), min_size=1, max_size=3, unique=True))
        if draw(st.booleans()):
            c["ranks"] = draw(st.lists(st.integers(0, D - 1), min_size=1, max_size=D, unique=True))
        if draw(st.booleans()):
            c["max_cw_shards"] = draw(st.integers(1, D))
        kernel = draw(st.sampled_from([None, "fused", "caching", "fixed"]))
        if kernel == "fused":
            c["compute_kernels"] = ["fused", "dense"]
        elif kernel == "caching":
            c["compute_kernels"] = ["fused_uvm_caching"]
        elif kernel == "fixed":
            c["cache_load_factor"] = draw(st.sampled_from([0.25, 0.5]))
        out[name] = c
    return out


@settings(max_examples=10, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(data=st.data())
def test_every_method_keeps_random_constraints(inst, data):
    """For a random constraint set, every method's plan keeps it, or the request is refused with one
    ConfigError that names a constrained table: at resolve (no plan can satisfy it) or, for exact,
    because its subproblem (every table table_wise in HBM) cannot hold it."""
    system, model = inst
    cons = data.draw(constraint_sets(list(model.tables.names), system.num_chips))
    try:
        resolve(cons, system, model)
    except pm.ConfigError as e:
        assert any(str(e).startswith(f"constraints: field '{n}.") for n in cons), str(e)
        event("refused")
        return
    event("searched")
    for method in METHODS:
        try:
            r = pm.search(system, model, method, seed=0, iterations=4, budget_s=None, constraints=cons)
        except pm.ConfigError as e:
            assert method == "exact" and "only placement the exact method solves for" in str(e), (method, str(e))
            continue
        assert plan_violations(r.plan, cons, system, model) == [], (method, cons)
        pm.validate_plan(r.plan, system, model, constraints=cons)


def test_a_pinned_table_stays_on_its_ranks_and_a_cached_one_at_its_load_factor(inst):
    system, model = inst
    a, b = model.tables.names[:2]
    cons = {a: {"sharding_types": ["table_wise"], "ranks": [3]},
            b: {"compute_kernels": ["fused_uvm_caching"], "cache_load_factor": 0.25}}
    for method in ("greedy", "gradient"):
        r = pm.search(system, model, method, seed=0, iterations=4, budget_s=None, constraints=cons)
        assert (r.plan.tables[a].sharding_type, r.plan.tables[a].ranks) == ("table_wise", [3])
        assert r.plan.tables[b].cache_ratio == 0.25 and r.plan.tables[b].sharding_type != "data_parallel"
        assert r.plan.torchrec()[b]["compute_kernel"] == "fused_uvm_caching"


# ------------------------------------------------------------------------- requests refused
def test_requests_no_plan_can_satisfy_are_refused_naming_table_and_constraint(inst):
    system, model = inst
    t0 = model.tables.names[0]
    dim = int(model.tables.dim[0])
    bad = {
        "empty": ({t0: {"sharding_types": ["column_wise"], "max_cw_shards": 1}}, [f"'{t0}.", "no sharding type"]),
        "min_partition": ({t0: {"min_partition": dim + 1}}, [f"{t0}.min_partition", f"dim {dim}"]),
        "rank": ({t0: {"ranks": [4]}}, [f"{t0}.ranks", "ranks 0..3"]),
        "unknown table": ({"nope": {"ranks": [0]}}, ["'nope'", "not a table", t0]),
        "unknown key": ({t0: {"rank": [0]}}, [f"{t0}.rank", "allowed: sharding_types"]),
        "unknown type": ({t0: {"sharding_types": ["grid"]}}, [f"{t0}.sharding_types", "table_wise"]),
        "fused_uvm": ({t0: {"compute_kernels": ["fused_uvm"]}}, ["fused_uvm", "not modelled", "fused_uvm_caching"]),
        "load factor": ({t0: {"cache_load_factor": 1.5}}, [f"{t0}.cache_load_factor", "(0, 1)"]),
        "factor without caching": ({t0: {"compute_kernels": ["fused"], "cache_load_factor": 0.5}},
                                   ["cache_load_factor", "fused_uvm_caching"]),
        "row_wise pinned": ({t0: {"sharding_types": ["row_wise"], "ranks": [0, 1]}}, [f"{t0}.", "row_wise is ruled out by ranks"]),
    }
    for what, (cons, needles) in bad.items():
        _error(lambda: resolve(cons, system, model), *needles)
    # too big for its pinned rank: c7 of 1e10 rows (2.6 TB) kept whole on one device
    text = pm.config.DATA_DIR.joinpath("models", "dlrm-small.toml").read_text()
    big = pm.workload.parse_model(tomllib.loads(text.replace("1000000, 1000000]", "1000000, 10000000000]")), "big")
    h = pm.load_system("h100-8")
    msg = _error(lambda: resolve({"c7": {"ranks": [0]}}, h, big), "c7.ranks", "no plan that fits", "2.6 TB")
    assert "table_wise" in msg
    _error(lambda: pm.search(h, big, "greedy", constraints={"c7": {"ranks": [0]}}), "c7.ranks")   # before any work


def test_a_plan_that_breaks_them_names_the_field(inst):
    system, model = inst
    plan = pm.default_plan(system, model)
    name = next(n for n, t in plan.tables.items() if t.sharding_type != "data_parallel")
    t = plan.tables[name]
    other = [st for st in SHARDING_TYPES if st != t.sharding_type]
    _error(lambda: pm.validate_plan(plan, system, model, constraints={name: {"sharding_types": other}}),
           f"tables.{name}.sharding_type", other[0])
    wrong = [r for r in range(system.num_chips) if r not in t.ranks][:1]
    assert plan_violations(plan, {name: {"ranks": wrong}}, system, model)[0][0] == f"tables.{name}.ranks"
    assert plan_violations(plan, {name: {"sharding_types": [t.sharding_type]}}, system, model) == []


def test_compute_kernels_follow_torchrec():
    assert compute_kernel("data_parallel", 1.0) == "dense"       # TorchRec's only kernel for data-parallel tables
    assert compute_kernel("table_wise", 1.0) == "fused"
    assert compute_kernel("row_wise", 0.3) == "fused_uvm_caching"


# ------------------------------------------------------------------------------- TorchRec in
@dataclass
class _CacheParams:                 # stand-ins with TorchRec 1.8's attribute names
    load_factor: float | None = None


@dataclass
class _ParameterConstraints:
    sharding_types: list | None = None
    compute_kernels: list | None = None
    min_partition: int | None = None
    pooling_factors: list = field(default_factory=lambda: [1.0])
    cache_params: _CacheParams | None = None
    enforce_hbm: bool | None = None
    feature_names: list | None = None
    device_group: str | None = None
    key_value_params: object = None


def test_torchrec_parameter_constraints_are_read_by_attribute(inst):
    system, model = inst
    a, b = model.tables.names[:2]
    c = as_constraints({a: _ParameterConstraints(sharding_types=["column_wise"], min_partition=32),
                        b: _ParameterConstraints(compute_kernels=["fused_uvm_caching"],
                                                 cache_params=_CacheParams(0.4), pooling_factors=[3.0])})
    assert c.tables[a] == TableConstraint(sharding_types=("column_wise",), min_partition=32)
    assert c.tables[b].cache_load_factor == 0.4 and c.ignored == (f"{b}.pooling_factors",)
    lim = resolve(c, system, model)
    t = 0
    dim = int(model.tables.dim[t])
    assert [k for k in range(2, 5) if lim.shards[t, k]] == [k for k in range(2, 5) if dim % k == 0 and dim // k >= 32]
    _error(lambda: from_torchrec({a: _ParameterConstraints(device_group="cpu")}), f"{a}.device_group", "cpu")


# ------------------------------------------------------------------------------------- files
def test_constraint_files_and_a_model_files_constraints(inst, tmp_path, capsys):
    system, model = inst
    path = tmp_path / "c.toml"
    path.write_text('[c0]\nsharding_types = ["table_wise"]\nranks = [2]\n')
    c = as_constraints(str(path))
    assert isinstance(c, Constraints) and c.tables["c0"].ranks == (2,) and c.source == str(path)
    bad = tmp_path / "bad.toml"
    bad.write_text('[c0]\nranks = "two"\n')
    _error(lambda: as_constraints(str(bad)), str(bad), "c0.ranks", "list of ranks")

    text = pm.config.DATA_DIR.joinpath("models", "dlrm-small.toml").read_text()
    with_c = tmp_path / "m.toml"
    with_c.write_text(text + '\n[constraints.c7]\ncompute_kernels = ["fused_uvm_caching"]\ncache_load_factor = 0.5\n')
    m = pm.load_model(str(with_c))
    sys16 = pm.load_system("mtia300-16")
    r = pm.search(sys16, str(with_c), "greedy")
    assert r.plan.tables["c7"].cache_ratio == 0.5
    typo = tmp_path / "typo.toml"
    typo.write_text(text + '\n[constraints.c9]\nranks = [0]\n')
    _error(lambda: pm.load_model(str(typo)), str(typo), "constraints.c9", "not a table")

    # the CLI: search keeps --constraints (over the model file's), evaluate reports what a plan breaks
    assert main(["search", "--system", "mtia300-16", "--model", str(with_c), "--method", "greedy",
                 "--constraints", str(path), "--no-progress", "--out", str(tmp_path / "p.json")]) == 0
    out = capsys.readouterr().out
    assert "constraints on 2 tables" in out
    saved = pm.load_plan(tmp_path / "p.json", sys16, m)
    assert saved.tables["c0"].ranks == [2] and saved.tables["c7"].cache_ratio == 0.5
    other = tmp_path / "o.toml"
    other.write_text('[c0]\nranks = [1]\n')
    assert main(["evaluate", "--system", "mtia300-16", "--model", str(with_c), "--plan", str(tmp_path / "p.json"),
                 "--constraints", str(other)]) == 0
    assert "constraint broken: tables.c0.ranks are [2]; its constraint ranks allows [1]" in capsys.readouterr().out


def test_pinned_ranks_allow_table_row_wise_on_a_whole_domain_only():
    system, model = pm.load_system("h100-16"), pm.load_model("dlrm-small")      # two scale-up domains of 8
    assert system.domain_size == 8
    TWRW, RW = SHARDING_TYPES.index("table_row_wise"), SHARDING_TYPES.index("row_wise")
    lim = resolve({"c7": {"ranks": list(range(8, 16))}}, system, model)
    assert lim.domains[7].tolist() == [0.0, 1.0] and lim.types[7, TWRW] == 1 and lim.types[7, RW] == 0
    lim = resolve({"c7": {"ranks": list(range(4, 12))}}, system, model)
    assert lim.domains[7].tolist() == [0.0, 0.0] and lim.types[7, TWRW] == 0
    plan = pm.default_plan(system, model)
    plan.tables["c7"] = pm.TablePlan("table_row_wise", list(range(8, 16)))
    assert plan_violations(plan, {"c7": {"ranks": list(range(8, 16))}}, system, model) == []
    assert plan_violations(plan, {"c7": {"ranks": list(range(8))}}, system, model)[0][0] == "tables.c7.ranks"
