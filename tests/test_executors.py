"""Replanned sweeps on every executor: the same seed gives the same table in this process, on a
process pool, on a user's Executor and on a local Ray instance; a point that fails keeps its row;
bad executors and unreachable clusters are one clear error; a fixed-plan sweep sharded over two
devices gives the one-device table."""

import concurrent.futures as cf
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import perfmodel as pm
from perfmodel.analysis import columns
from perfmodel.cli import main

SYSTEM, MODEL = "h100-16", "dlrm-small"           # two hosts: the scale-out bandwidth matters
VARY = {"scale_out_bandwidth_GBps": [12.5, 400.0], "a2a_precision": ["fp32", "bf16"]}
ROUNDS = 5


def _same(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for k in a:
        assert np.array_equal(a[k], b[k]), k


@pytest.fixture(scope="module")
def serial():
    return columns(pm.sweep(SYSTEM, MODEL, VARY, iterations=ROUNDS, seed=1, executor="serial"))


def test_serial_replanned_sweep_searches_each_hardware_point(serial):
    assert set(serial["plan"]) == {f"search ({ROUNDS} rounds, seed 1)"} and set(serial["error"]) == {""}
    greedy = columns(pm.sweep(SYSTEM, MODEL, VARY, plan="greedy"))
    assert set(greedy["plan"]) == {"greedy"}
    # the search starts from greedy's plan and keeps the best it finds
    assert np.all(serial["step_ms"] <= greedy["step_ms"] * (1 + 1e-6))
    # more scale-out bandwidth never makes the searched step slower
    assert np.all(serial["step_ms"][2:] <= serial["step_ms"][:2] * (1 + 1e-6))


def test_process_pool_and_user_executor_give_the_serial_table(serial):
    _same(columns(pm.sweep(SYSTEM, MODEL, VARY, iterations=ROUNDS, seed=1, workers=2)), serial)
    with cf.ThreadPoolExecutor(2) as ex:
        _same(columns(pm.sweep(SYSTEM, MODEL, VARY, iterations=ROUNDS, seed=1, executor=ex)), serial)


def test_local_ray_gives_the_serial_table(serial):
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        _same(columns(pm.sweep(SYSTEM, MODEL, VARY, iterations=ROUNDS, seed=1, executor="ray")), serial)
    finally:
        ray.shutdown()


def test_a_failed_point_keeps_its_row_and_says_why():
    def planner(system, model):
        if float(system.nic.active_ports * system.nic.port_Bps) > 100e9:     # nominal (PCIe caps the link)
            raise RuntimeError("no plan for this one")
        return pm.default_plan(system, model)

    t = columns(pm.sweep("h100-8", MODEL, {"scale_out_bandwidth_GBps": [50.0, 400.0]}, plan=planner))
    assert list(t["error"]) == ["", "RuntimeError: no plan for this one"]
    assert bool(t["feasible"][0]) and not bool(t["feasible"][1])
    assert np.isfinite(t["step_ms"][0]) and np.isnan(t["step_ms"][1]) and np.isnan(t["memory_max_GB"][1])


def test_cli_lists_failed_points_and_fails_only_if_all_did(capsys):
    base = ["sweep", "--system", "h100-8", "--model", MODEL, "--plan", "greedy"]
    assert main(base + ["--vary", "embedding_rows_scale=1,100000"]) == 0
    out, err = capsys.readouterr()
    assert "plan: greedy per point" in out
    assert "1 of 2 points failed" in err and "embedding_rows_scale=100000.0: " in err and "fits on no plan" in err
    assert main(base + ["--vary", "embedding_rows_scale=100000", "--json"]) == 1
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["plan"] == "greedy" and "fits on no plan" in doc["rows"][0]["error"]
    assert "1 of 1 points failed" in err


@pytest.mark.parametrize("kw, match", [
    (dict(executor="dask"), r"field 'executor': is 'dask'; allowed: serial, process, ray or a concurrent"),
    (dict(workers=0), r"field 'workers': must be an integer >= 1"),
    (dict(ray_address="127.0.0.1:1"), r"field 'ray_address': cannot reach a Ray cluster at '127.0.0.1:1'"),
    (dict(ray_address="nowhere"), r"'nowhere' is not host:port"),
    (dict(plan="replan"), r"field 'plan': is 'replan'; allowed: 'search', 'greedy'"),
    (dict(iterations=0), r"field 'iterations': must be an integer >= 1"),
])
def test_bad_executors_and_plans_are_one_error(kw, match):
    with pytest.raises(pm.ConfigError, match=match):
        pm.sweep("h100-8", MODEL, {"scale_out_bandwidth_GBps": [50.0, 400.0]}, **kw)


def test_cli_unreachable_ray_is_one_error_naming_the_flag(capsys):
    code = main(["sweep", "--system", "h100-8", "--model", MODEL, "--vary", "scale_out_bandwidth_GBps=50,400",
                 "--ray", "127.0.0.1:1"])
    assert code == 2
    err = capsys.readouterr().err
    assert "field '--ray': cannot reach a Ray cluster at '127.0.0.1:1'" in err and "Traceback" not in err


def test_fixed_plan_that_does_not_fit_names_the_system(tmp_path):
    m16, model = pm.load_system("mtia300-16"), pm.load_model(MODEL)
    plan = pm.Plan(tables={n: pm.TablePlan("table_wise", [15 - i % 16]) for i, n in enumerate(model.tables.names)})
    path = tmp_path / "mtia300-16.json"
    plan.save(path)
    with pytest.raises(pm.ConfigError, match=r"mtia300-16.json.*does not fit h100-8"):
        pm.compare(["mtia300-16", "h100-8"], MODEL, plan=str(path))
    with pytest.raises(pm.ConfigError, match=r"the given plan does not fit h100-8"):
        pm.sweep("h100-8", MODEL, {"scale_out_bandwidth_GBps": [50.0]}, plan=plan)
    assert m16.num_chips == 16


SHARDED = """
import json, perfmodel as pm, jax
from perfmodel.analysis import columns
s = pm.load_system("h100-8")
t = columns(pm.sweep(s, "dlrm-small", {"scale_out_bandwidth_GBps": [10.0, 20.0, 40.0], "offload_engines": [0, 16]},
                     plan=pm.default_plan(s, pm.load_model("dlrm-small"))))
print(json.dumps({"devices": jax.device_count(), "step_ms": t["step_ms"].tolist()}))
"""


def test_fixed_plan_sweep_sharded_over_two_devices_equals_one_device():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", SHARDED], env=env, capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    s = pm.load_system("h100-8")
    here = columns(pm.sweep(s, MODEL, {"scale_out_bandwidth_GBps": [10.0, 20.0, 40.0], "offload_engines": [0, 16]},
                            plan=pm.default_plan(s, pm.load_model(MODEL))))
    assert got["devices"] == 2
    assert np.allclose(got["step_ms"], here["step_ms"], rtol=1e-6)


def test_a_plan_that_cannot_be_pickled_is_one_error_on_the_pool():
    with pytest.raises(pm.ConfigError, match=r"field 'executor': the jobs cannot be sent to other processes"):
        pm.sweep("h100-8", MODEL, {"scale_out_bandwidth_GBps": [50.0, 400.0]},
                 plan=lambda s, m: pm.default_plan(s, m), executor="process", workers=2)


def test_the_pools_default_size_is_perfmodel_workers(monkeypatch):
    """$PERFMODEL_WORKERS sizes the pool a call gives no workers for: 1 runs the jobs in this process
    (a function that cannot be pickled is no error there), 2 sends them to a pool (where it is); a
    value that is not a count is one error naming the variable."""
    import operator

    from perfmodel.analysis import executors
    square = lambda x: x * x        # noqa: E731 - a lambda does not pickle
    jobs = [(square, 2), (square, 3)]
    monkeypatch.setenv("PERFMODEL_WORKERS", "1")
    assert executors.default_workers() == 1 and executors.run(operator.call, jobs) == [4, 9]
    monkeypatch.setenv("PERFMODEL_WORKERS", "2")
    with pytest.raises(pm.ConfigError, match=r"field 'executor': the jobs cannot be sent to other processes"):
        executors.run(operator.call, jobs)
    assert executors.run(operator.call, jobs, workers=1) == [4, 9]        # a call's own choice wins
    for bad in ("all", "0", "\u00b2"):        # a word, no process, a digit int() does not read
        monkeypatch.setenv("PERFMODEL_WORKERS", bad)
        with pytest.raises(pm.ConfigError, match=r"environment: field 'PERFMODEL_WORKERS': must be an integer >= 1"):
            executors.run(operator.call, jobs)
    monkeypatch.delenv("PERFMODEL_WORKERS")
    assert executors.default_workers() == executors.cores()


def test_a_local_ray_cluster_takes_the_pools_size(monkeypatch):
    """ray_address="local" starts Ray with `workers` CPUs, by default $PERFMODEL_WORKERS, as the
    process pool would (a stand-in for Ray records what it was started with)."""
    import operator
    import types

    from perfmodel.analysis import executors

    class Ray:
        def __init__(self):
            self.inits, self.up = [], False

        def is_initialized(self):
            return self.up

        def init(self, **kw):
            self.inits.append(kw)
            self.up = True

        def shutdown(self):
            self.up = False

        def remote(self, f):
            return types.SimpleNamespace(remote=lambda *args: f(*args))

        def get(self, results):
            return list(results)

        def wait(self, refs, num_returns=1):
            return refs[:num_returns], refs[num_returns:]

    ray = Ray()
    monkeypatch.setitem(sys.modules, "ray", ray)
    jobs = [(abs, -2), (abs, -3)]
    monkeypatch.setenv("PERFMODEL_WORKERS", "3")
    assert executors.run(operator.call, jobs, executor="ray", ray_address="local") == [2, 3]
    assert ray.inits[-1]["num_cpus"] == 3 and not ray.up           # started for the call, and stopped
    assert executors.run(operator.call, jobs, executor="ray", ray_address="local", workers=2) == [2, 3]
    assert ray.inits[-1]["num_cpus"] == 2
    monkeypatch.delenv("PERFMODEL_WORKERS")
    executors.run(operator.call, jobs, executor="ray", ray_address="local")
    assert ray.inits[-1]["num_cpus"] == executors.cores()


@pytest.mark.parametrize("executor", ["serial", cf.ThreadPoolExecutor(2)])
def test_jobs_with_a_description_say_how_many_run_where_and_count_them(executor, capsys):
    """A study's per-point searches are minutes of work: stderr names them and their number up front,
    and the results keep the jobs' order whichever finishes first."""
    import operator

    from perfmodel.analysis import executors
    jobs = [(abs, -2), (abs, -3), (abs, -5)]
    assert executors.run(operator.call, jobs, executor=executor, progress="searching plans") == [2, 3, 5]
    err = capsys.readouterr().err
    where = "in this process" if executor == "serial" else "on ThreadPoolExecutor"
    assert err == f"searching plans: 3 jobs {where}\n", err      # not a terminal: the line, no redrawn bar
    assert executors.run(operator.call, jobs, executor=executor) == [2, 3, 5]
    assert capsys.readouterr().err == ""                      # no description: silent, as a library call is


def test_only_searches_are_announced():
    from perfmodel.analysis.planning import planner, progress_text
    assert progress_text(planner("search", iterations=7, seed=3)) == "searching a plan per point (7 rounds each, seed 3)"
    assert progress_text(planner("greedy")) is None
