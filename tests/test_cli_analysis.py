"""perfmodel sweep | trace | plot, in-process through cli.main (sensitivity, compare: test_cli_studies.py)."""

import contextlib
import csv
import io
import json

import pytest

from perfmodel.analysis import KNOBS
from perfmodel.cli import main

SMALL = ["--system", "h100-8", "--model", "dlrm-small"]


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    """Round-robin table-wise plans (cheap: no planner run) for h100-8 and mtia300-16, as JSON files; from
    the last rank down, so that mtia300-16's does not fit h100-8."""
    import perfmodel as pm
    model = pm.load_model("dlrm-small")
    out = {}
    for name in ("h100-8", "mtia300-16"):
        s = pm.load_system(name)
        plan = pm.Plan(tables={n: pm.TablePlan("table_wise", [s.num_chips - 1 - i % s.num_chips])
                               for i, n in enumerate(model.tables.names)}, offload=float(s.offload.engines) > 0)
        path = tmp_path_factory.mktemp("plans") / f"{name}.json"
        plan.save(path)
        out[name] = str(path)
    return out


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def one_error_line(code, err):
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("perfmodel: error: ") and "Traceback" not in err, err
    return lines[0]


def test_sweep_writes_table_and_plot_and_never_overwrites(tmp_path, plans):
    out, png = tmp_path / "s.csv", tmp_path / "s.png"
    argv = ["sweep", *SMALL, "--plan", plans["h100-8"], "--vary", "scale_out_bandwidth_GBps=25:100:3", "--vary", "offload_engines=0,16",
            "--out", str(out), "--plot", str(png)]
    code, stdout, err = run(argv)
    assert code == 0 and err == "", err
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 6 and [float(r["scale_out_bandwidth_GBps"]) for r in rows[::2]] == [25.0, 62.5, 100.0]
    assert {"step_ms", "samples_per_s", "exposed_comm_ms", "feasible", "dense_sync_busy_max_ms", "memory_max_GB",
            "scale_out_link_GBps", "plan", "error"} <= set(rows[0])
    assert all(float(r["step_ms"]) > 0 and r["plan"] == "plan file h100-8.json" and r["error"] == "" for r in rows)
    assert "plan: plan file h100-8.json, fixed" in stdout
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert "6 points (grid)" in stdout and f"wrote table: {out}" in stdout
    before = out.read_text()
    line = one_error_line(*run(argv)[::2])
    assert str(out) in line and "exists already" in line
    assert out.read_text() == before
    # only the plot exists: still refused before any work, and the table is not written
    out.unlink()
    line = one_error_line(*run(argv)[::2])
    assert str(png) in line and not out.exists()


def test_sweep_json_and_paired(plans):
    code, stdout, err = run(["sweep", *SMALL, "--plan", plans["h100-8"], "--vary", "global_batch=4096,8192", "--vary",
                             "a2a_precision=fp32,bf16", "--paired", "--json"])
    assert code == 0, err
    data = json.loads(stdout)
    assert data["system"] == "h100-8" and [r["a2a_precision"] for r in data["rows"]] == ["fp32", "bf16"]
    assert data["plan"] == "plan file h100-8.json"
    assert [r["global_batch"] for r in data["rows"]] == [4096, 8192]


@pytest.mark.parametrize("vary, needle", [
    ("bogus_knob=1,2", "unknown knob 'bogus_knob'"),
    ("scale_out_bandwidth_GBps=-1", "vary.scale_out_bandwidth_GBps"),
    ("offload_engines=0:16:2:cubic", "start:stop:count"),
    ("nic_scale_up_fraction=0.5", "does not carry scale-up"),
    ("a2a_precision=int4", "allowed: one of fp32, bf16, fp8"),
    ("scale_out_bandwidth_GBps", "NAME=VALUES"),
])
def test_sweep_bad_knob_is_one_line_exit_2(vary, needle):
    line = one_error_line(*run(["sweep", *SMALL, "--vary", vary])[::2])
    assert needle in line


def test_sweep_list_knobs():
    code, out, _ = run(["sweep", "--list-knobs"])
    assert code == 0
    for name in KNOBS:
        assert name in out


def test_trace_cli(tmp_path, plans):
    out = tmp_path / "step.json"
    code, stdout, err = run(["trace", "--system", "mtia300-16", "--model", "dlrm-small", "--out", str(out),
                             "--plan", plans["mtia300-16"], "--max-devices", "3"])
    assert code == 0, err
    tr = json.loads(out.read_text())
    assert len(tr["otherData"]["shown_devices"]) == 3 and "perfetto" in stdout
    assert {e["tid"] for e in tr["traceEvents"] if e["ph"] == "X"} <= {1, 2, 3}
    line = one_error_line(*run(["trace", "--system", "mtia300-16", "--model", "dlrm-small", "--out", str(out)])[::2])
    assert str(out) in line
    line = one_error_line(*run(["trace", "--system", "mtia300-16", "--model", "dlrm-small", "--out",
                                str(tmp_path / "x.json"), "--devices", "0,99"])[::2])
    assert "rank 99 does not exist" in line


def test_plot_cli(tmp_path, plans):
    for i, (kind, extra) in enumerate((("breakdown", ["--systems", "h100-8,mtia300-16", "--plan", "greedy", "--workers", "1"]),
                        ("breakdown", ["--systems", "mtia300-16", "--plan", plans["mtia300-16"]]),
                        ("timeline", ["--system", "mtia300-16", "--plan", plans["mtia300-16"], "--max-devices", "2"]),
                        ("tradeoff", ["--system", "h100-8", "--vary", "scale_out_bandwidth_GBps=25,50,100",
                                      "--vary", "nic_attach_pcie=0,1", "--plan", "greedy"]))):
        path = tmp_path / f"{kind}{i}.png"
        code, stdout, err = run(["plot", kind, "--model", "dlrm-small", *extra, "--out", str(path)])
        assert code == 0, (kind, err)
        assert path.read_bytes()[:4] == b"\x89PNG" and path.stat().st_size > 10_000
        line = one_error_line(*run(["plot", kind, "--model", "dlrm-small", *extra, "--out", str(path)])[::2])
        assert str(path) in line
    line = one_error_line(*run(["plot", "breakdown", "--model", "dlrm-small", "--out", str(tmp_path / "y.png")])[::2])
    assert "--systems" in line
    # a plan file is honoured, and refused, naming the system, where it does not fit
    line = one_error_line(*run(["plot", "breakdown", "--model", "dlrm-small", "--systems", "mtia300-16,h100-8",
                                "--plan", plans["mtia300-16"], "--out", str(tmp_path / "z.png")])[::2])
    assert "mtia300-16.json" in line and "does not fit h100-8" in line and not (tmp_path / "z.png").exists()


def test_scaling_cli(tmp_path):
    out = tmp_path / "scaling.csv"
    code, stdout, err = run(["scaling", "--system", "h100-8", "--model", "dlrm-small", "--chips", "8,16",
                             "--mode", "weak", "--plan", "greedy", "--workers", "1", "--out", str(out)])
    assert code == 0, err
    head, cols, *rows = stdout.splitlines()[:4]
    assert "plan: greedy per size" in head
    assert cols.split() == ["chips", "mode", "global_batch", "step_ms", "samples_per_s", "speedup", "efficiency", "replicas",
                            "plan"]
    saved = list(csv.DictReader(out.open()))
    assert [int(r["chips"]) for r in saved] == [8, 16] and [float(r["global_batch"]) for r in saved] == [4096, 8192]
    assert float(saved[0]["efficiency"]) == 1.0 and {r["plan"] for r in saved} == {"greedy"}
    eff = float(saved[1]["samples_per_s"]) / float(saved[0]["samples_per_s"]) / 2
    assert float(saved[1]["efficiency"]) == pytest.approx(eff)
    line = one_error_line(*run(["scaling", "--system", "h100-8", "--model", "dlrm-small", "--chips", "8,x"])[::2])
    assert "--chips" in line
    line = one_error_line(*run(["plot", "scaling", "--model", "dlrm-small", "--system", "h100-8",
                                "--out", str(tmp_path / "z.png")])[::2])
    assert "--chips" in line


def test_a_study_says_its_searches_and_quiet_silences_them():
    """A sweep that searches per point names the searches on stderr before they start; --quiet on any
    command turns progress off (in its process and its workers) and leaves the environment as it was."""
    import os

    from perfmodel.config import QUIET
    argv = ["sweep", *SMALL, "--vary", "scale_out_bandwidth_GBps=25,50", "--iterations", "3"]
    code, out, err = run(argv)
    assert code == 0 and err.startswith("searching a plan per point (3 rounds each, seed 0): 2 jobs in this process"), err
    code, quiet_out, err = run(argv + ["--quiet"])
    assert code == 0 and err == "" and quiet_out.splitlines()[1:] == out.splitlines()[1:]    # line 0 has the wall time
    assert QUIET not in os.environ
