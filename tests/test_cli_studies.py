"""perfmodel compare and sensitivity (perfmodel/cli/studies.py), in-process through cli.main."""

import json
import re

import pytest

import perfmodel as pm
from perfmodel.analysis.attribution import attribute

from test_cli_analysis import one_error_line, run

SMALL = ["--system", "h100-8", "--model", "dlrm-small"]
PAIR = ["--systems", "mtia300-16,h100-8", "--model", "dlrm-small", "--plan", "greedy", "--workers", "1"]


def test_compare_table_json_and_attribution():
    code, out, err = run(["compare", *PAIR])
    assert code == 0, err
    lines = out.splitlines()
    assert "each system with its own plan: greedy" in lines[0] and "step ms" in lines[2] and "MFU %" in lines[2]
    rows = {l.split()[0]: l.split() for l in lines[3:5]}
    for name in ("mtia300-16", "h100-8"):               # ms in the table = the model's step for that plan
        s, m = pm.load_system(name), pm.load_model("dlrm-small")
        step = float(pm.evaluate(s, m, pm.greedy_plan(s, m)).step_s)
        assert rows[name][2] == "1"                       # replicas: greedy plans shard over every chip
        assert float(rows[name][3]) == round(step * 1e3, 3)
    code, out, err = run(["compare", *PAIR, "--attribute", "--json"])
    assert code == 0, err
    data = json.loads(out)
    assert data["plan"] == "greedy" and [r["system"] for r in data["systems"]] == ["mtia300-16", "h100-8"]
    assert set(data["plans"]) == {"mtia300-16", "h100-8"} and "tables" in data["plans"]["h100-8"]
    att = data["attribution"]
    slow = max(data["systems"], key=lambda r: r["step_ms"])["system"]
    assert att["system"] == slow and len(att["combinations"]) == 2 ** len(att["factors"])
    assert sum(att["shares_s"].values()) + att["rest_s"] == pytest_approx(att["gap_s"])
    ref = attribute(slow, "mtia300-16" if slow == "h100-8" else "h100-8", "dlrm-small", plan="greedy", executor="serial")
    assert att["shares_s"] == pytest_approx(ref.shares_s)


def pytest_approx(x):
    return pytest.approx(x, rel=1e-9, abs=1e-15)


def test_compare_and_sensitivity_bad_input():
    line = one_error_line(*run(["compare", "--systems", "mtia300-16,h100-8,h100-16", "--model", "dlrm-small",
                                "--attribute"])[::2])
    assert "--attribute" in line and "lists 3" in line
    line = one_error_line(*run(["compare", "--systems", " , ", "--model", "dlrm-small"])[::2])
    assert "--systems" in line
    line = one_error_line(*run(["compare", *PAIR[:4], "--plan", "nonsense"])[::2])
    assert "plan" in line and "allowed: 'search', 'greedy'" in line
    line = one_error_line(*run(["sensitivity", "--system", "h100-8", "--model", "dlrm-small", "--replan", "-2"])[::2])
    assert "--replan" in line
    line = one_error_line(*run(["sensitivity", "--system", "h100-8", "--model", "dlrm-small", "--replan", "1",
                                "--workers", "0"])[::2])
    assert "--workers" in line


@pytest.mark.xdist_group("sensitivity")     # with tests/test_sensitivity.py: the same compiled gradients
def test_sensitivity_ranked_table_names_its_plan_and_json():
    code, out, err = run(["sensitivity", *SMALL, "--plan", "greedy", "--top", "5"])
    assert code == 0, err
    lines = out.splitlines()
    rows = [l for l in lines if l[:4].strip().isdigit()]
    assert len(rows) == 5 and "elasticities of step_s" in lines[0] and "plan: greedy" in lines[0]
    assert "envelope theorem" in out
    values = [abs(float(re.search(r" ([+-]\d+\.\d{4})(  |$)", r).group(1))) for r in rows]
    assert values == sorted(values, reverse=True)
    code, out, _ = run(["sensitivity", *SMALL, "--plan", "greedy", "--metric", "usd_per_million_samples", "--json"])
    data = json.loads(out)
    assert data["metric"] == "usd_per_million_samples" and data["rows"][0]["parameter"] == "chip price"
    assert data["plan"] == "greedy" and data["rows"][0]["plan"] == "greedy"
    assert {"parameter", "unit", "value", "elasticity", "derivative_per_unit", "knob"} <= set(data["rows"][0])
    # --replan's points searched where --workers says (one worker: in this process)
    code, out, err = run(["sensitivity", *SMALL, "--plan", "greedy", "--replan", "1", "--workers", "1", "--json"])
    assert code == 0, err
    replanned = [r for r in json.loads(out)["rows"] if r.get("replan_elasticity") is not None]
    assert len(replanned) == 1 and replanned[0]["knob"]
