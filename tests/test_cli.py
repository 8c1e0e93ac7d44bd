"""The `perfmodel` command line, in-process through cli.main (one subprocess checks the entry point)."""

import contextlib
import copy
import io
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from perfmodel import PHASES
from perfmodel.cli import main

DATA = Path(__file__).resolve().parents[1] / "data"
EVAL = ["evaluate", "--system", "h100-8", "--model", "dlrm-small", "--plan", "greedy"]   # the default searches: see below
DLRM_SMALL_BATCH = 4096                     # data/models/dlrm-small.toml: global_batch
UNIT = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


def run(argv):
    """(exit code, stdout, stderr) of main(argv)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def one_error_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("perfmodel: error: ") and "Traceback" not in err
    return lines[0]


@pytest.fixture(scope="module")
def evaluated():
    """The JSON of evaluate on h100-8 / dlrm-small (default plan)."""
    code, out, err = run(EVAL + ["--json"])
    assert code == 0 and err == ""
    return json.loads(out)


# ------------------------------------------------------------------------------------------ evaluate

def test_evaluate_json_summary(evaluated):
    s = evaluated["summary"]
    assert evaluated["system"] == "h100-8" and evaluated["model"] == "dlrm-small"
    assert s["step_s"] > 0
    assert s["samples_per_s"] == pytest.approx(DLRM_SMALL_BATCH / s["step_s"], rel=1e-5)
    assert s["feasible"] is True
    assert 0 < s["memory_max_bytes"] <= s["memory_capacity_bytes"]
    assert s["memory_capacity_bytes"] == pytest.approx(0.9 * 80e9, rel=1e-6)   # usable 90 % of 80 GB
    assert 0 < s["mfu"] < 1


def test_evaluate_json_phases(evaluated):
    phases = evaluated["phases"]
    assert set(phases) == set(PHASES)
    step = evaluated["summary"]["step_s"]
    for name, p in phases.items():
        assert p["stream"] in ("compute", "comm")
        assert 0 <= p["start_s"] <= p["end_s"] <= step * (1 + 1e-6), name
        assert p["busy_s"] >= 0
    assert phases["input_dist"]["stream"] == "comm" and phases["emb_fwd"]["stream"] == "compute"
    assert len(evaluated["plan"]["tables"]) == 8


def test_evaluate_table(evaluated):
    code, out, err = run(EVAL)
    assert code == 0 and err == ""
    assert out.startswith("dlrm-small on h100-8 (8 x h100), plan: greedy\n")
    assert "step time" in out and "throughput" in out and "M samples/s" in out
    for p in PHASES:
        assert re.search(rf"^{p}\s+(compute|comm)\s", out, re.M), p
    # the printed step time is the JSON one, in the unit it is printed in
    m = re.search(r"^step time\s+([\d.]+) (s|ms|us)", out, re.M)
    assert m, out
    assert float(m[1]) * UNIT[m[2]] == pytest.approx(evaluated["summary"]["step_s"], rel=2e-3)
    m = re.search(r"throughput\s+([\d.]+) M samples/s", out)
    assert float(m[1]) * 1e6 == pytest.approx(evaluated["summary"]["samples_per_s"], rel=2e-3)


def test_unknown_system_is_one_line_and_exit_2():
    code, out, err = run(["evaluate", "--system", "nosuch-64", "--model", "dlrm-small"])
    assert code == 2 and out == ""
    line = one_error_line(err)
    assert "unknown system 'nosuch-64'" in line and "mtia300-<N>" in line


def test_bad_model_file_is_one_line_naming_file_and_field(tmp_path):
    path = tmp_path / "m.toml"
    text = (DATA / "models" / "dlrm-small.toml").read_text()
    assert text.count("global_batch = 4096") == 1
    path.write_text(text.replace("global_batch = 4096", "global_batch = -1"))
    code, out, err = run(["evaluate", "--system", "h100-8", "--model", str(path)])
    assert code == 2 and out == ""
    line = one_error_line(err)
    assert f"{path}: field 'global_batch': must be an integer >= 1 and <= 1e+08 (samples), got -1" in line


def test_plan_on_a_missing_rank_is_refused(tmp_path, evaluated):
    plan = copy.deepcopy(evaluated["plan"])
    plan["tables"]["c0"] = {"sharding_type": "table_wise", "ranks": [99], "cache_ratio": 1.0}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    code, out, err = run(EVAL + ["--plan", str(path)])
    assert code == 2 and out == ""
    line = one_error_line(err)
    assert f"{path}: field 'tables.c0.ranks': rank 99 does not exist: system h100-8 has ranks 0..7" in line


def test_save_plan_then_read_it_back(tmp_path, evaluated):
    path = tmp_path / "saved.json"
    code, out, _ = run(EVAL + ["--json", "--save-plan", str(path)])
    assert code == 0
    saved = json.loads(path.read_text())
    assert saved == json.loads(out)["plan"] == evaluated["plan"]
    code, out, _ = run(EVAL + ["--json", "--plan", str(path)])
    assert code == 0
    assert json.loads(out)["summary"]["step_s"] == pytest.approx(evaluated["summary"]["step_s"], rel=1e-6)
    # a second --save-plan to the same path is refused, and the file is left as it was
    before = path.read_text()
    code, out, err = run(EVAL + ["--save-plan", str(path)])
    assert code == 2 and out == ""
    assert one_error_line(err) == f"perfmodel: error: {path}: exists already; choose another name or remove it first"
    assert path.read_text() == before


def test_save_plan_into_missing_folder_is_one_line(tmp_path):
    path = tmp_path / "nowhere" / "p.json"
    code, out, err = run(EVAL + ["--save-plan", str(path)])
    assert code == 2 and out == ""
    assert f"{path}: its folder {str(path.parent)!r} does not exist" in one_error_line(err)


def test_evaluate_help_names_formats_and_units(capsys):
    with pytest.raises(SystemExit) as info:
        main(["evaluate", "--help"])
    assert info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for piece in ("TOML", "JSON", "seconds", "bytes", "samples/s", "--save-plan", "never overwrites"):
        assert piece in text, piece


def test_missing_required_flag_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["evaluate", "--system", "h100-8"])
    assert info.value.code == 2
    assert "--model" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- list

def _presets():
    chips = sorted(p.stem for p in (DATA / "chips").glob("*.toml"))
    models = sorted(p.stem for p in (DATA / "models").glob("*.toml"))
    systems = {p.stem: tomllib.loads(p.read_text())["sizes"] for p in (DATA / "systems").glob("*.toml")}
    return chips, models, systems


def test_list_names_every_preset():
    code, out, err = run(["list"])
    assert code == 0 and err == ""
    chips, models, systems = _presets()
    assert len(chips) >= 6 and len(models) >= 5 and len(systems) >= 6
    first = [line.split()[0] for line in out.splitlines() if line.startswith("  ")]
    for fam, sizes in systems.items():
        assert f"{fam}-{{{','.join(map(str, sizes))}}}" in first, fam
    for name in chips + models:
        assert name in first, name
    assert len(first) == len(chips) + len(models) + len(systems)
    assert out.index("systems") < out.index("chips:") < out.index("models:")


def test_list_json():
    code, out, _ = run(["list", "--json"])
    assert code == 0
    data = json.loads(out)
    chips, models, systems = _presets()
    assert [c["name"] for c in data["chips"]] == chips
    assert [m["name"] for m in data["models"]] == models
    assert {s["family"]: s["sizes"] for s in data["systems"]} == systems
    for s in data["systems"]:
        assert s["names"] == [f"{s['family']}-{n}" for n in s["sizes"]]
        assert s["description"]
    assert all(c["description"] for c in data["chips"] + data["models"])


def test_entry_point_runs_as_a_module():
    proc = subprocess.run([sys.executable, "-m", "perfmodel", "list"], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0, proc.stderr
    assert "mtia300-{16,64,256,1024}" in proc.stdout and "dlrm-dcnv2-mlperf" in proc.stdout


def test_a_reader_that_goes_away_ends_the_command_quietly():
    """`perfmodel list | head -1`: the pipe closes before the command is done writing. The command
    stops with the shell's SIGPIPE status (141) and no traceback (it was a BrokenPipeError
    traceback from deep in the printing)."""
    proc = subprocess.Popen([sys.executable, "-m", "perfmodel", "list"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=Path(__file__).resolve().parents[1])
    proc.stdout.close()                  # before the child's first write
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_search_reports_each_rank_as_a_planner_does():
    """After a search, per rank: its shards (model-parallel) and replicas, HBM used and free, compute
    and communication busy time, idle time behind the busiest rank, which binds the step."""
    import numpy as np

    import perfmodel as pm
    from perfmodel.evaluate import COMM_PHASES
    from perfmodel.report import format_per_rank, per_rank
    system, model = pm.load_system("h100-8"), pm.load_model("dlrm-small")
    names = model.tables.names
    plan = pm.Plan(tables={n: (pm.TablePlan("table_wise", [0]) if i < 3 else pm.TablePlan("data_parallel", list(range(8))))
                           for i, n in enumerate(names)})
    bd = pm.evaluate(system, model, plan)
    rows = per_rank(bd, plan, model)
    assert [r["shards"] for r in rows] == [3] + [0] * 7 and {r["replicas"] for r in rows} == {len(names) - 3}
    compute = np.asarray(bd.compute_s)
    busiest = int(np.argmax(compute))
    assert [r["binding"] for r in rows] == [d == busiest for d in range(8)]
    for d, r in enumerate(rows):
        assert r["compute_s"] == pytest.approx(float(compute[d])) and r["idle_s"] == pytest.approx(float(compute.max() - compute[d]))
        assert r["comm_s"] == pytest.approx(sum(float(np.broadcast_to(bd.phase_s[p], (8,))[d]) for p in COMM_PHASES))
        assert r["hbm_used_bytes"] + r["hbm_free_bytes"] == pytest.approx(float(bd.capacity_bytes))
    assert "<- binds the step" in format_per_rank(rows).splitlines()[1 + busiest]
    code, out, err = run(["search", "--system", "h100-8", "--model", "dlrm-small", "--method", "greedy", "--no-progress", "--json"])
    assert code == 0 and len(json.loads(out)["ranks"]) == 8
    code, out, err = run(["search", "--system", "h100-8", "--model", "dlrm-small", "--method", "greedy", "--no-progress"])
    assert code == 0 and "per rank (greedy's plan):" in out and out.count("<- binds the step") == 1


def test_searched_plan_is_the_studies_plan_kept_on_disk(tmp_path):
    """evaluate's default plan is the one every study searches for the hardware (planner("search")),
    kept in the compile cache's folder: the second call reads it, a damaged file is searched again, and
    no folder means no file."""
    import jax

    import perfmodel as pm
    from perfmodel.analysis.planning import planner, searched_plan
    system, model = pm.load_system("h100-8"), pm.load_model("dlrm-small")
    want = planner("search", iterations=12, seed=1)(system, model).to_dict()
    before = jax.config.jax_compilation_cache_dir
    try:
        jax.config.update("jax_compilation_cache_dir", str(tmp_path))
        plan, kept = searched_plan(planner("search", iterations=12, seed=1), system, model)
        (kept_file,) = tmp_path.glob("perfmodel-plan-*.json")
        assert not kept and plan.to_dict() == want and json.loads(kept_file.read_text()) == want
        plan, kept = searched_plan(planner("search", iterations=12, seed=1), system, model)
        assert kept and plan.to_dict() == want
        kept_file.write_text('{"tables": {')                       # cut short: searched again, written anew
        plan, kept = searched_plan(planner("search", iterations=12, seed=1), system, model)
        assert not kept and json.loads(kept_file.read_text()) == want
        assert not searched_plan(planner("search", iterations=12, seed=2), system, model)[1]     # another seed: another plan
        assert len(list(tmp_path.glob("perfmodel-plan-*.json"))) == 2
        jax.config.update("jax_compilation_cache_dir", None)
        assert not searched_plan(planner("search", iterations=12, seed=1), system, model)[1]     # no folder: nothing kept
    finally:
        jax.config.update("jax_compilation_cache_dir", before)


def test_evaluate_defaults_to_the_searched_plan():
    args = ["evaluate", "--system", "h100-8", "--model", "dlrm-small", "--iterations", "12", "--seed", "1"]
    code, first, _ = run(args)
    code2, second, err = run(args)
    assert code == code2 == 0
    assert first.startswith("dlrm-small on h100-8 (8 x h100), plan: search (12 rounds, seed 1)")
    assert second.startswith("dlrm-small on h100-8 (8 x h100), plan: search (12 rounds, seed 1), kept from an earlier call")
    assert err == ""                                                # nothing searched the second time
    code, out, _ = run(args + ["--json"])
    import perfmodel as pm
    from perfmodel.analysis.planning import planner
    system, model = pm.load_system("h100-8"), pm.load_model("dlrm-small")
    want = float(pm.evaluate(system, model, planner("search", iterations=12, seed=1)(system, model)).step_s)
    assert json.loads(out)["summary"]["step_s"] == pytest.approx(want, rel=1e-6)
