"""`--chips N`: every command that takes --system loads the system's family at N chips (a preset
name's size replaced, a TOML path at a size other than its smallest), and a bad N ends in one error
line naming --chips and what is allowed. All but one test stop before anything is compiled; that
one evaluates h100-8 / dlrm-small, test_cli's problem, so one compiled program serves both."""

import contextlib
import io
import json
from pathlib import Path

import pytest

import perfmodel as pm
from perfmodel.cli import build_parser, main
from perfmodel.cli.args import load_system_arg
from perfmodel.config import ConfigError

DATA = Path(__file__).resolve().parents[1] / "data"
MTIA = str(DATA / "systems" / "mtia300.toml")     # sizes = [16, ...]: a TOML path loads 16 chips unless --chips
A100 = str(DATA / "systems" / "a100.toml")     # its outermost level holds 2,048 chips

# each command that takes --system, as far as its own arguments go ({out}: a folder for its output)
COMMANDS = {
    "evaluate": ["evaluate", "--model", "dlrm-small"],
    "search": ["search", "--model", "dlrm-small"],
    "sweep": ["sweep", "--model", "dlrm-small", "--vary", "offload_engines=0,16"],
    "sensitivity": ["sensitivity", "--model", "dlrm-small"],
    "trace": ["trace", "--model", "dlrm-small", "--out", "{out}/t.json"],
    "plot-tradeoff": ["plot", "tradeoff", "--model", "dlrm-small", "--out", "{out}/t.png"],
    "plot-timeline": ["plot", "timeline", "--model", "dlrm-small", "--out", "{out}/t.png"],
}


def argv(command, out=Path(".")):
    return [a.replace("{out}", str(out)) for a in COMMANDS[command]]


def run(argv):
    """(exit code, stdout, stderr) of main(argv)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_loads_a_toml_at_the_chips_given(command):
    args = build_parser().parse_args(argv(command) + ["--system", MTIA, "--chips", "48"])
    system = load_system_arg(args)
    assert system.name == "mtia300-48" and system.num_chips == 48
    assert [lv.size for lv in system.levels] == [16, 48]          # three racks of 16 under the cluster level
    plain = load_system_arg(build_parser().parse_args(argv(command) + ["--system", MTIA]))
    assert plain.num_chips == 16                                  # the TOML's smallest size without --chips


@pytest.mark.parametrize("chips,pieces", [
    ("0", ["from 1 to 65,536", "got '0'"]),
    ("-8", ["from 1 to 65,536", "got '-8'"]),
    ("x", ["one whole number of chips", "got 'x'"]),
    ("1.5", ["one whole number of chips", "got '1.5'"]),
    ("16,32", ["one whole number of chips", "got '16,32'"]),
    ("65537", ["from 1 to 65,536"]),
    ("b300-8:8192", ["outermost level ('cluster' in", "holds 4,096 chips", "use at most 4,096"]),
    ("gb200nvl72-72:74", ["74 chips do not fill whole hosts of 4", "'chips_per_host' in", "gb200nvl72.toml",
                          "e.g. 72 or 76"]),
], ids=["zero", "negative", "text", "fraction", "list", "beyond-the-most", "beyond-the-outer-level", "partial-host"])
def test_bad_chips_is_one_error_naming_the_flag(chips, pieces):
    system, _, chips = chips.rpartition(":")
    code, out, err = run(["evaluate", "--system", system or "mtia300-16", "--chips", chips, "--model", "dlrm-small"])
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("perfmodel: error: field '--chips': ")
    for piece in pieces:
        assert piece in err, (piece, err)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_refuses_a_bad_chips_before_any_work(command, tmp_path):
    code, _, err = run(argv(command, tmp_path) + ["--system", A100, "--chips", "4096"])
    assert code == 2 and len(err.splitlines()) == 1 and list(tmp_path.iterdir()) == []
    assert "field '--chips': the outermost level ('cluster' in" in err and "use at most 2,048" in err


def test_plot_breakdown_refuses_chips_and_scaling_keeps_its_list(tmp_path):
    code, _, err = run(["plot", "breakdown", "--systems", "h100-8", "--chips", "8", "--model", "dlrm-small",
                        "--out", str(tmp_path / "b.png")])
    assert code == 2 and "field '--chips': does not apply to plot breakdown" in err
    helps = {a.dest: a.help for a in build_parser()._subparsers._group_actions[0].choices["plot"]._actions}
    assert "scaling: a list of chip counts, e.g. 16,64,256" in helps["chips"]


def test_python_chips_names_the_argument_and_the_family_file():
    with pytest.raises(ConfigError) as info:
        pm.load_system("gb200nvl72-72", chips=74)
    err = info.value
    assert (err.source, err.field) == ("", "chips")
    assert "('chips_per_host' in " in err.message and "gb200nvl72.toml" in err.message and "(e.g. 72 or 76)" in err.message


def test_a_family_name_takes_its_size_from_chips():
    assert pm.load_system("mtia300", chips=40).name == "mtia300-40"
    args = build_parser().parse_args(argv("search") + ["--system", "mtia300", "--chips", "40"])
    assert load_system_arg(args).domain_sizes == (16, 16, 8)      # two full racks and one of 8
    with pytest.raises(ConfigError, match=r"unknown system 'mtia300'.*a family name with chips"):
        pm.load_system("mtia300")


def test_chips_replaces_the_size_of_a_preset_name():
    code, out, _ = run(["evaluate", "--system", "h100-64", "--chips", "8", "--model", "dlrm-small", "--plan", "greedy", "--json"])
    assert code == 0
    got = json.loads(out)
    code, out, _ = run(["evaluate", "--system", "h100-8", "--model", "dlrm-small", "--plan", "greedy", "--json"])
    want = json.loads(out)
    assert got["system"] == "h100-8" and got["summary"] == want["summary"] and got["plan"] == want["plan"]
