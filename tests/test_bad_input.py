"""Every bad input of issue 29 ends in one clear error (or, where it is valid, in finite numbers).

One parametrized case per input the issue lists, through the command line in-process (cli.main)
or the Python API: the command ends with exit code 2 and one stderr line `perfmodel: error:
<file or argument>: field '<x>': <what is allowed>`, no traceback, nothing written. Almost all
fail at the edge, before anything is compiled; the few that evaluate share h100-8 / dlrm-small
(test_cli's problem, so one compiled program serves both).
"""

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import perfmodel as pm
from perfmodel import plots, trace
from perfmodel.cli import main

DATA = Path(__file__).resolve().parents[1] / "data"
REPO = DATA.parent
NAN_OR_INF = re.compile(r"\b(nan|inf)\b", re.I)


def run(argv):
    """(exit code, stdout, stderr) of the command line, in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def edit(folder: Path, kind: str, preset: str, key: str, new: str, name: str) -> str:
    """data/<kind>/<preset>.toml copied to folder/name with the line `key = ...` (the first after
    [section] for a key 'section.key') replaced by `new`."""
    lines = (DATA / kind / f"{preset}.toml").read_text().splitlines()
    section, _, key = key.rpartition(".")
    start = lines.index(f"[{section}]") if section else 0
    hits = [i for i, line in enumerate(lines) if i >= start and re.match(rf"\s*{re.escape(key)}\s*=", line)]
    assert hits and (section or len(hits) == 1), (preset, key, hits)
    lines[hits[0]] = new
    path = folder / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def csv(folder: Path, name: str, *rows: str) -> str:
    """A folder holding one dataset CSV with `rows` under validate's header."""
    d = folder / name
    d.mkdir()
    (d / f"{name}.csv").write_text("system,collective,algorithm,size_bytes,metric,value,harness,source,note\n"
                                   + "".join(r + "\n" for r in rows))
    return str(d)


S8, SMALL = ["--system", "h100-8"], ["--model", "dlrm-small"]
EVAL = ["evaluate", *S8, *SMALL, "--plan", "greedy"]
SWEEP = ["sweep", *S8, *SMALL]
TIMELINE = ["plot", "timeline", *S8, *SMALL]
HUGE_COUNT = "1" + "0" * 30
ROW = "a100-8,all_reduce,ring,{size},busbw_GBps,18,nccl-tests,nccl-tests,"

# The twelve chip fields whose 1e-300 became 0 in float32 and a NaN step time.
TINY_CHIP_FIELDS = ["peak_bf16_TFLOPs", "matmul_efficiency_max", "hbm_bandwidth_GBps", "hbm_efficiency",
                    "gather_efficiency_max", "port_bandwidth_Gbps", "pcie_bandwidth_GBps", "nic.bandwidth_efficiency",
                    "scale_up.bandwidth_GBps", "scale_up.bandwidth_efficiency", "link_bandwidth_GBps", "tdp_W"]

# id: (argv from the folder of edited files, pieces the one error line says). Pieces name the file
# or argument, the field and what is allowed.
CASES = {
    # ---- runaway memory and silent NaN
    "dcnv2-layers-1e30": (lambda f: ["evaluate", "--system", "mtia300-64", "--model",
                                     edit(f, "models", "prod-856", "layers", "layers = 1e30", "prod.toml")],
                          ["prod.toml: field 'dense.layers[1].layers'", "an integer >= 1 and <= 10000", "got 1e+30"]),
    "hstu-layers-1e8": (lambda f: ["evaluate", "--system", "mtia300-16", "--model",
                                   edit(f, "models", "hstu-seq", "layers", "layers = 100000000", "hstu8.toml")],
                        ["hstu8.toml: field 'dense.layers[1].layers'", "<= 10000", "got 100000000"]),
    "hstu-layers-1e30": (lambda f: ["evaluate", "--system", "mtia300-16", "--model",
                                    edit(f, "models", "hstu-seq", "layers", "layers = 1e30", "hstu30.toml")],
                         ["hstu30.toml: field 'dense.layers[1].layers'", "<= 10000"]),
    **{f"chip-{k}-1e-300": ((lambda k: lambda f: EVAL + ["--chip", edit(f, "chips", "h100", k, f"{k.split('.')[-1]} = 1e-300",
                                                                           f"tiny-{k}.toml")])(k),
                            [f"tiny-{k}.toml: field '", "a finite number >= ", "got 1e-300"])
       for k in TINY_CHIP_FIELDS},
    "embedding-bytes-1e-300": (lambda f: [*EVAL[:3], "--model", edit(f, "models", "dlrm-small", "bytes_per_element",
                                                                    "bytes_per_element = 1e-300", "bpe.toml")],
                               ["bpe.toml: field 'embeddings.bytes_per_element'", ">= 0.125 and <= 64 (bytes)"]),
    "trace-of-a-tiny-hbm": (lambda f: ["trace", *S8, *SMALL, "--out", str(f / "t.json"), "--chip",
                                       edit(f, "chips", "h100", "hbm_bandwidth_GBps", "hbm_bandwidth_GBps = 1e-300", "hbm.toml")],
                            ["hbm.toml: field 'memory.hbm_bandwidth_GBps'", ">= 0.001 and <= 1e+06 (GB/s)"]),
    "search-of-a-tiny-hbm": (lambda f: ["search", *S8, *SMALL, "--method", "greedy", "--no-progress", "--out",
                                        str(f / "p.json"), "--chip", edit(f, "chips", "h100", "hbm_bandwidth_GBps",
                                                                          "hbm_bandwidth_GBps = 1e-300", "hbm2.toml")],
                             ["hbm2.toml: field 'memory.hbm_bandwidth_GBps'"]),
    "plot-timeline-of-a-tiny-hbm": (lambda f: TIMELINE + ["--out", str(f / "tl.png"), "--chip", edit(
        f, "chips", "h100", "hbm_bandwidth_GBps", "hbm_bandwidth_GBps = 1e-300", "hbm3.toml")],
                                    ["hbm3.toml: field 'memory.hbm_bandwidth_GBps'"]),
    "sweep-scale-out-1e9-to-1e10": (lambda f: SWEEP + ["--vary", "scale_out_bandwidth_GBps=50,1e9,4e9,1e10"],
                                    ["field 'vary.scale_out_bandwidth_GBps'", "<= 1e+06 (GB/s)"]),
    "sweep-pcie-1e-5-and-1e-6": (lambda f: SWEEP + ["--vary", "pcie_bandwidth_GBps=63,1e-5,1e-6"],
                                 ["field 'vary.pcie_bandwidth_GBps'", "value 1e-05 is out of range", ">= 0.001"]),
    "nic-port-1e30": (lambda f: EVAL + ["--chip", edit(f, "chips", "h100", "port_bandwidth_Gbps",
                                                       "port_bandwidth_Gbps = 1e30", "port.toml")],
                      ["port.toml: field 'nic.port_bandwidth_Gbps'", "<= 8e+06 (Gb/s)", "got 1e+30"]),
    "sweep-scale-out-1e39": (lambda f: SWEEP + ["--vary", "scale_out_bandwidth_GBps=1e39"],
                             ["field 'vary.scale_out_bandwidth_GBps'", "out of range"]),
    "sweep-hbm-1e-40": (lambda f: SWEEP + ["--vary", "hbm_bandwidth_GBps=1e-40"],
                        ["field 'vary.hbm_bandwidth_GBps'", ">= 0.001 and <= 1e+06 (GB/s)"]),
    "sweep-rows-scale-1e35": (lambda f: SWEEP + ["--vary", "embedding_rows_scale=1e35"],
                              ["field 'vary.embedding_rows_scale'", "out of range"]),
    # ---- tracebacks
    "system-sizes-empty": (lambda f: ["evaluate", *SMALL, "--system", edit(f, "systems", "h100", "sizes", "sizes = []",
                                                                          "nosizes.toml")],
                           ["nosizes.toml: field 'sizes'", "at least one chip count"]),
    "synthetic-num-tables-1e30": (lambda f: ["evaluate", "--system", "mtia300-64", "--model", edit(
        f, "models", "prod-856", "num_tables", f"num_tables = {HUGE_COUNT}", "tables.toml")],
                                  ["tables.toml: field 'embeddings.synthetic.num_tables'", "at most 100,000 tables"]),
    "dim-1e30": (lambda f: [*EVAL[:3], "--model", edit(f, "models", "dlrm-small", "embeddings.dim", f"dim = {HUGE_COUNT}",
                                                       "dim.toml")],
                 ["dim.toml: field 'embeddings.dim[0]'", "an integer >= 1 and <= 100000", "(31 digits)"]),
    "vary-a-trillion-points": (lambda f: SWEEP + ["--vary", "scale_out_bandwidth_GBps=1:2:1000000000000"],
                               ["field 'vary.scale_out_bandwidth_GBps'", "count must be from 1 to 10,000,000"]),
    "plot-out-unknown-format": (lambda f: TIMELINE + ["--out", str(f / "x.xyz")],
                                ["x.xyz: is not a figure name", ".png", ".svg", ".pdf"]),
    "sweep-plot-unknown-format": (lambda f: SWEEP + ["--vary", "scale_out_bandwidth_GBps=50,100", "--plot", str(f / "y.xyz")],
                                  ["y.xyz: is not a figure name", ".png"]),
    "plot-out-unwritable": (lambda f: TIMELINE + ["--out", "/proc/perfmodel-test.png"],
                            ["/proc/perfmodel-test.png: cannot be written"]),
    "sweep-out-unwritable": (lambda f: SWEEP + ["--vary", "scale_out_bandwidth_GBps=50,100", "--out", "/proc/pm.csv"],
                             ["/proc/pm.csv: cannot be written"]),
    "sweep-plot-unwritable": (lambda f: SWEEP + ["--vary", "scale_out_bandwidth_GBps=50,100", "--plot", "/proc/pm.png"],
                              ["/proc/pm.png: cannot be written"]),
    "trace-max-devices-negative": (lambda f: ["trace", *S8, *SMALL, "--max-devices", "-5", "--out", str(f / "t2.json")],
                                   ["field '--max-devices': must be an integer >= 1, got -5"]),
    "plot-scaling-chips-abc": (lambda f: ["plot", "scaling", *S8, *SMALL, "--chips", "16,abc", "--out", str(f / "s.png")],
                               ["field '--chips': '16,abc' must be comma-separated chip counts"]),
    "plot-timeline-devices-999": (lambda f: TIMELINE + ["--devices", "999", "--out", str(f / "tl2.png")],
                                  ["field '--devices': rank 999 does not exist: h100-8 has ranks 0..7"]),
    "guard-unit-a-list": (lambda f: EVAL + ["--guard", _write(f, "unit.json", {"unit": ["ms"], "cap": 1, "tables": {}})],
                          ["unit.json: field 'unit': is ['ms']; allowed: s, ms, us"]),
    "guard-column-wise-key-not-a-number": (lambda f: EVAL + ["--guard", _write(
        f, "cw.json", {"cap": 1, "tables": {"c0": {"column_wise": {"\u00b2": 1}}}})],
                                           ["cw.json: field 'tables.c0.column_wise.\u00b2'", "an integer in 2..8"]),
    "validate-non-utf8": (lambda f: ["validate", "--data", _latin1(f)],
                          ["latin1.csv: is not UTF-8 text"]),
    "file-name-of-300-characters": (lambda f: [*EVAL[:3], "--model", str(f / ("m" * 300 + ".toml"))],
                                    ["cannot be read: File name too long"]),
    "preset-name-of-300-characters": (lambda f: [*EVAL[:3], "--model", "m" * 300],
                                      ["field 'model': unknown preset 'mmmm"]),
    "proc-self-mem-as-model": (lambda f: [*EVAL[:3], "--model", "/proc/self/mem"],
                               ["/proc/self/mem: cannot be read"]),
    "proc-self-mem-as-chip": (lambda f: EVAL + ["--chip", "/proc/self/mem"], ["/proc/self/mem: cannot be read"]),
    "proc-self-mem-as-plan": (lambda f: EVAL + ["--plan", "/proc/self/mem"], ["/proc/self/mem: cannot be read"]),
    # ---- smaller
    "search-out-missing-folder": (lambda f: ["search", *S8, *SMALL, "--budget-s", "600", "--no-progress",
                                             "--out", str(f / "missing" / "p.json")],
                                  ["missing/p.json: its folder", "does not exist"]),
    "fits-on-no-plan": (lambda f: EVAL + ["--chip", edit(f, "chips", "h100", "hbm_capacity_GB", "hbm_capacity_GB = 0.001",
                                                         "one-mb.toml")],
                        ["model dlrm-small on system h100-8: field 'model': fits on no plan", "of the 900 kB a device"]),
    "system-chip-empty": (lambda f: ["evaluate", *SMALL, "--system", edit(f, "systems", "h100", "chip", 'chip = ""',
                                                                         "nochip.toml")],
                          ["nochip.toml: field 'chip': is empty"]),
    "validate-unknown-system": (lambda f: ["validate", "--data", csv(f, "nosuch", ROW.format(size=1024),
                                                                     ROW.format(size=2048).replace("a100-8", "nosuch-8"))],
                                ["nosuch.csv:3: field 'system': unknown system 'nosuch-8'"]),
    "validate-one-row": (lambda f: ["validate", "--data", csv(f, "one", ROW.format(size=1048576))],
                         ["one.csv: holds 1 row; a dataset needs at least 2"]),
    "validate-size-1e300": (lambda f: ["validate", "--data", csv(f, "huge", ROW.format(size="1e300"),
                                                                 ROW.format(size=1048576))],
                            ["huge.csv:2: field 'size_bytes': must be a number from 1 to 1e+15 (bytes), got '1e300'"]),
    "save-plan-empty": (lambda f: EVAL + ["--save-plan", ""], ["field '--save-plan': is empty"]),
    "plan-empty": (lambda f: EVAL + ["--plan", ""], ["field '--plan': is empty"]),
    "tradeoff-vary-one-knob-twice": (lambda f: ["plot", "tradeoff", *S8, *SMALL, "--out", str(f / "tr.png"), "--vary",
                                                "scale_out_bandwidth_GBps=50,100", "--vary", "scale_out_bandwidth_GBps=60"],
                                     ["field 'vary.scale_out_bandwidth_GBps': is given twice"]),
    "breakdown-systems-comma": (lambda f: ["plot", "breakdown", "--systems", ",", *SMALL, "--out", str(f / "bd.png")],
                                ["field '--systems': ',' lists no system"]),
    "guard-cap-1e-300": (lambda f: EVAL + ["--guard", _write(f, "cap.json", {"unit": "ms", "cap": 1e-300, "tables": {}})],
                         ["cap.json: field 'cap': must be a finite number >= 1e-06 and <= 1e+09 (ms), got 1e-300"]),
    # ---- issue 50: files that are not files, names the OS refuses, the commands' own tracebacks
    "import-tables-fifo": (lambda f: ["import-tables", _fifo(f, "t.csv"), "--out", str(f / "m.toml")],
                           ["t.csv: is not a regular file (a FIFO, a device or a socket); give a CSV of tables"]),
    "import-tables-dev-zero": (lambda f: ["import-tables", _zero(f, "z.csv"), "--out", str(f / "m.toml")],
                               ["z.csv: is not a regular file"]),
    "import-tables-a-folder": (lambda f: ["import-tables", str(f), "--out", str(f / "m.toml")],
                               [f"is a folder; give the CSV of tables's path"]),
    "import-tables-cell-over-the-csv-limit": (
        lambda f: ["import-tables", _text(f, "big.csv", "name,num_embeddings,embedding_dim,feature_names\n"
                                          f"t0,1000,64,{'f' * 200_000}\n"), "--out", str(f / "m.toml")],
        ["big.csv: has a cell longer than 131,072 characters"]),
    "validate-csv-fifo": (lambda f: ["validate", "--data", _in_folder(f, "fifo", _fifo)],
                          ["fifo/fifo.csv: is not a regular file"]),
    "validate-csv-dev-zero": (lambda f: ["validate", "--data", _in_folder(f, "zero", _zero)],
                              ["zero/zero.csv: is not a regular file"]),
    "validate-collectives-on-one-chip": (lambda f: ["validate", "--kind", "collectives", "--data", csv(
        f, "one", *(ROW.format(size=s).replace("a100-8", "h100-1") for s in (1024, 2048)))],
                                         ["one.csv:2: field 'system': h100-1 has 1 chip", "at least 2"]),
    "validate-contention-column-missing": (lambda f: _contention(f, "compute_alone_us", None),
                                           ["interference.csv: field 'compute_alone_us': column is missing"]),
    "validate-contention-time-negative": (lambda f: _contention(f, "compute_overlapped_us", "-2451"),
                                          ["interference.csv:2: field 'compute_overlapped_us'", "got '-2451'"]),
    "validate-contention-time-nan": (lambda f: _contention(f, "compute_alone_us", "nan"),
                                     ["interference.csv:2: field 'compute_alone_us'", "from 0 (excluded)", "'nan'"]),
    "validate-contention-time-text": (lambda f: _contention(f, "compute_alone_us", "fast"),
                                      ["interference.csv:2: field 'compute_alone_us'", "got 'fast'"]),
    "validate-contention-note-without-the-time": (lambda f: _contention(f, "note", "no time here", row=7),
                                                  ["field 'note': must say 'total iteration time <X> ms'"]),
    "compare-one-system-twice": (lambda f: ["compare", "--systems", "h100-8,h100-8", *SMALL, "--json"],
                                 ["field '--systems': names system 'h100-8' twice"]),
    "sweep-plan-name-of-300-characters": (lambda f: SWEEP + ["--vary", "scale_out_bandwidth_GBps=50,100", "--plan",
                                                             str(f / ("p" * 300 + ".json"))],
                                          ["field 'plan': cannot be read: File name too long"]),
    "validate-data-name-of-300-characters": (lambda f: ["validate", "--data", str(f / ("d" * 300))],
                                             ["cannot be read: File name too long"]),
    "schema-markdown-name-of-300-characters": (lambda f: ["schema", "--markdown", str(f / ("s" * 300 + ".md"))],
                                               ["cannot be written: File name too long"]),
    "schema-markdown-a-folder": (lambda f: ["schema", "--markdown", str(f)], ["is a folder; give the markdown file"]),
    "calibrate-out-name-of-300-characters": (lambda f: ["calibrate", "--grid", "tiny", "--out",
                                                        str(f / ("c" * 300 + ".toml"))],
                                             ["cannot be written: File name too long"]),
    "calibrate-measurements-name-of-300-characters": (
        lambda f: ["calibrate", "--grid", "tiny", "--out", str(f / "c.toml"), "--measurements",
                   str(f / ("m" * 300 + ".csv"))], ["cannot be written: File name too long"]),
    "ray-host-label-empty": (lambda f: SWEEP + ["--vary", "scale_out_bandwidth_GBps=50,100", "--ray", "..:80"],
                             ["field '--ray': '..:80': '..' is not a host name"]),
    "ray-host-label-of-64-characters": (lambda f: SWEEP + ["--vary", "scale_out_bandwidth_GBps=50,100", "--ray",
                                                           "h" * 64 + ".example:80"], ["is not a host name"]),
    "sweep-plot-of-the-plan-column": (lambda f: SWEEP + ["--vary", "scale_out_bandwidth_GBps=50,100", "--plan", "greedy",
                                                         "--plot", str(f / "p.png"), "--y", "plan"],
                                      ["field '--y': 'plan' is not a number the sweep computes; one of step_ms,"]),
    "sensitivity-of-a-system-priced-at-0": (
        lambda f: ["sensitivity", "--system", edit(f, "systems", "h100", "host_usd_per_hour", "host_usd_per_hour = 0",
                                                   "free.toml"), "--chips", "8", *SMALL, "--plan", "greedy",
                   "--metric", "usd_per_million_samples", "--chip",
                   edit(f, "chips", "h100", "price.usd_per_hour", "usd_per_hour = 0", "free-chip.toml")],
        ["field 'usd_per_hour, host_usd_per_hour': are both 0, so the cost is 0 and has no elasticity"]),
    "plan-nested-100000-deep": (lambda f: EVAL + ["--plan", _text(f, "deep.json", "[" * 100_000 + "]" * 100_000)],
                                ["deep.json: nests tables or lists too deeply; at most 64 levels"]),
    "plan-nested-100-deep": (lambda f: EVAL + ["--plan", _text(f, "deep100.json", '{"tables": ' + "[" * 100 + "]" * 100
                                                               + "}")],
                             ["deep100.json: nests tables or lists too deeply"]),
    "model-nested-100000-deep": (lambda f: [*EVAL[:3], "--model", _text(f, "deep.toml", "a = " + "[" * 100_000
                                                                         + "]" * 100_000)],
                                 ["deep.toml: nests tables or lists too deeply"]),
}


def _text(folder: Path, name: str, text: str) -> str:
    (folder / name).write_text(text)
    return str(folder / name)


def _fifo(folder: Path, name: str) -> str:
    os.mkfifo(folder / name)          # reading one waits for a writer: forever
    return str(folder / name)


def _zero(folder: Path, name: str) -> str:
    (folder / name).symlink_to("/dev/zero")     # never ends
    return str(folder / name)


def _in_folder(folder: Path, name: str, make) -> str:
    (folder / name).mkdir()
    make(folder / name, f"{name}.csv")
    return str(folder / name)


def _contention(folder: Path, column: str, value, row: int = 0) -> list[str]:
    """validate --kind contention on a copy of interference.csv whose `column` is removed (value
    None) or set to `value` in data row `row`."""
    import csv as _csv
    with open(DATA / "measurements" / "contention" / "interference.csv", newline="") as fh:
        rows = list(_csv.DictReader(fh))
    names = [c for c in rows[0] if c != column or value is not None]
    if value is not None:
        rows[row][column] = value
    with open(folder / "interference.csv", "w", newline="") as fh:
        w = _csv.DictWriter(fh, names, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return ["validate", "--kind", "contention", "--data", str(folder)]


def _write(folder: Path, name: str, data: dict) -> str:
    (folder / name).write_text(json.dumps(data))
    return str(folder / name)


def _latin1(folder: Path) -> str:
    d = folder / "latin1"
    d.mkdir(exist_ok=True)
    (d / "latin1.csv").write_bytes("system,collective,algorithm,size_bytes,metric,value,harness,source,note\n"
                                   "a100-8,all_reduce,ring,1024,busbw_GBps,18,nccl-tests,M\u00fcller,\n".encode("latin-1"))
    return str(d)


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_input_ends_in_one_clear_error(case, tmp_path):
    argv, pieces = CASES[case]
    argv = argv(tmp_path)
    inputs = set(tmp_path.rglob("*"))
    code, out, err = run(argv)
    lines = err.splitlines()
    assert code == 2 and out == "" and len(lines) == 1, err
    assert lines[0].startswith("perfmodel: error: ") and "Traceback" not in err
    for piece in pieces:
        assert piece in lines[0], f"{piece!r} not in {lines[0]!r}"
    assert set(tmp_path.rglob("*")) == inputs                     # no output written, not even in part


def test_a_system_file_without_a_suffix_loads_as_a_model_file_does(tmp_path):
    """--system refused an existing TOML path without a suffix that --model and --chip take."""
    system = tmp_path / "h100-system"
    shutil.copy(DATA / "systems" / "h100.toml", system)
    code, out, err = run(["evaluate", "--system", str(system), *SMALL, "--plan", "greedy", "--json"])
    assert code == 0 and err == ""
    summary = json.loads(out)["summary"]
    assert json.loads(out)["system"] == "h100-8" and 0 < summary["step_s"] < 1
    assert not NAN_OR_INF.search(out)


# ------------------------------------------------------------------------------------- Ctrl-C

def test_ctrl_c_during_a_search_is_one_line_and_exit_130(monkeypatch, tmp_path):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    from perfmodel.search import api
    monkeypatch.setattr(api, "search", interrupted)
    out_file = tmp_path / "p.json"
    code, out, err = run(["search", *S8, *SMALL, "--no-progress", "--out", str(out_file)])
    assert code == 130 and out == "" and err == "perfmodel: interrupted\n"
    assert not out_file.exists()                                   # no partial plan


CHILD = """
import sys, threading
from perfmodel.search import api
from perfmodel.cli import main
def search(*args, **kwargs):    # a compile still running in a thread, then Ctrl-C
    threading.Thread(target=threading.Event().wait, name="compile").start()
    raise KeyboardInterrupt
api.search = search
sys.argv = ["perfmodel", "search", "--system", "h100-8", "--model", "dlrm-small", "--no-progress"]
sys.exit(main())
"""


def test_ctrl_c_ends_the_process_though_a_thread_still_works():
    """Run as the process, main() does not wait for a thread that never ends (an XLA compile cannot
    be stopped; joining it at shutdown aborted the process with 'FATAL: exception not rethrown')."""
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 130 and done.stderr == "perfmodel: interrupted\n" and done.stdout == ""



class _FullDisk(io.StringIO):
    def write(self, text):
        raise OSError(28, "No space left on device")


@pytest.mark.parametrize("argv", [["list"], ["list", "--json"]])
def test_a_full_stdout_is_one_line_naming_it(argv):
    """A full disk under stdout gave a traceback (OSError errno 28 from the command's print): one line
    naming stdout, exit code 2, as any output that cannot be written."""
    err = io.StringIO()
    with contextlib.redirect_stdout(_FullDisk()), contextlib.redirect_stderr(err):
        code = main(argv)
    assert code == 2 and err.getvalue() == "perfmodel: error: stdout: cannot be written: No space left on device\n"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
def test_a_full_stdout_ends_the_process_in_one_line():
    """`perfmodel list > /dev/full`: the write fails at the command's last flush, and Python's own
    flush at exit must not print a second error."""
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "perfmodel", "list"], stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=300, cwd=REPO)
    assert (done.returncode, done.stderr) == (2, "perfmodel: error: stdout: cannot be written: No space left on device\n")



def test_a_closed_stdout_is_no_traceback():
    """`perfmodel list >&-`: Python starts with sys.stdout None, and main()'s last flush raised
    AttributeError. Python prints nothing to a closed stdout; the command ends as it would."""
    done = subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", sys.executable, "-m", "perfmodel", "list"],
                          stderr=subprocess.PIPE, text=True, timeout=300, cwd=REPO)
    assert (done.returncode, done.stderr) == (0, "")


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero here")
def test_a_device_as_the_reference_to_replace_is_refused():
    """schema --markdown replaces only a file it wrote, so it reads the file first: /dev/zero (or
    /dev/full) was read until the process ran out of memory."""
    code, out, err = run(["schema", "--markdown", "/dev/zero"])
    assert code == 2 and out == "" and err.startswith("perfmodel: error: /dev/zero: is not a regular file")

@pytest.mark.parametrize("command", [["uncertainty", "--draws", "16"], ["sensitivity"]])
def test_a_negative_top_is_refused(command):
    """--top -1 printed every row but the last (a slice from the end) and exited 0."""
    code, out, err = run([*command, *S8, *SMALL, "--plan", "greedy", "--top", "-1"])
    assert code == 2 and out == "" and err == ("perfmodel: error: field '--top': must be 0 (every row) or a number of "
                                               "rows to print, got -1\n")

# ------------------------------------------------------------------------------------- Python API

@pytest.fixture(scope="module")
def problem():
    """h100-8, dlrm-small and every table data-parallel (a plan of 8 ranks, as mtia300-16 is not)."""
    system, model = pm.load_system("h100-8"), pm.load_model("dlrm-small")
    plan = pm.Plan(tables={n: pm.TablePlan("data_parallel", list(range(8))) for n in model.tables.names})
    return system, model, plan


MTIA16 = lambda: pm.load_system("mtia300-16")        # a NIC that carries scale-up: the split knobs apply


API_CASES = {
    "chips-abc": (lambda p: pm.load_system("h100-16", chips="abc"), "chips", "an integer from 1 to 65,536"),
    "chips-nan": (lambda p: pm.load_system("h100-16", chips=float("nan")), "chips", "got nan"),
    "chips-zero": (lambda p: pm.load_system("h100-16", chips=0), "chips", "got 0"),
    "chips-1.5": (lambda p: pm.load_system("h100-16", chips=1.5), "chips", "got 1.5"),
    "chips-True": (lambda p: pm.load_system("h100-16", chips=True), "chips", "got True"),
    "chips-beyond-the-most": (lambda p: pm.load_system("mtia300-16", chips=2 ** 17), "chips", "got 131072"),
    "system-name-beyond-the-most": (lambda p: pm.load_system("mtia300-131072"), "system", "1 to 65,536"),
    "load-model-123": (lambda p: pm.load_model(123), "model", "a model preset name or a file path, got int 123"),
    "load-chip-None": (lambda p: pm.load_chip(None), "chip", "got NoneType"),
    "compare-empty": (lambda p: pm.compare([], "dlrm-small"), "systems", "a non-empty list"),
    "compare-a-string": (lambda p: pm.compare("h100-16", "dlrm-small"), "systems", "a non-empty list"),
    "scaling-chips-abc": (lambda p: pm.scaling("h100-16", "dlrm-small", ["abc"]), "chips", "integers from 1"),
    "random-plans-n-negative": (lambda p: pm.random_plans(jax.random.PRNGKey(0), p[0], p[1], n=-1), "n",
                                "an integer from 1 to"),
    "random-plans-n-too-many": (lambda p: pm.random_plans(jax.random.PRNGKey(0), p[0], p[1], n=10 ** 9), "n",
                                "at most 268,435,456 placement entries"),
    "temperature-negative": (lambda p: pm.evaluate(*p, temperature=-1.0), "temperature", "got -1.0"),
    "temperature-nan": (lambda p: pm.evaluate(*p, temperature=float("nan")), "temperature", "got nan"),
    "temperature-tiny": (lambda p: pm.evaluate(*p, temperature=1e-30), "temperature", "from 1e-06 to 1000"),
    "sweep-scale-out-splits-the-nic-past-its-bound": (
        lambda p: pm.sweep(MTIA16(), p[1], {"scale_out_bandwidth_GBps": [50, 1e6]}), "vary.scale_out_bandwidth_GBps",
        "makes nic.scale_up_fraction 0.000799361, outside what the model takes: a finite number >= 0.001 and <= 0.999"),
    "sweep-rows-scale-past-a-tables-bound": (
        lambda p: pm.sweep(p[0], "hstu-seq", {"embedding_rows_scale": [1, 1e5]}), "vary.embedding_rows_scale",
        "makes embeddings.rows 1e+13, outside what the model takes: an integer >= 1 and <= 1e+12 (rows)"),
    # each knob alone keeps the NIC split within its bounds; together they push it to 2000 / 2001
    "sweep-two-knobs-at-a-corner": (
        lambda p: pm.sweep(MTIA16(), p[1], {"scale_up_bandwidth_GBps": [100, 2000], "scale_out_bandwidth_GBps": [1, 10]}),
        "vary", "scale_up_bandwidth_GBps=2000, scale_out_bandwidth_GBps=1 make nic.scale_up_fraction 0.9995"),
    "set-knobs-past-a-bound": (lambda p: pm.set_knobs(MTIA16(), p[1], pm.to_arrays(p[2], p[0], p[1]),
                                                      nic_bandwidth_GBps=1e-3), "vary.nic_bandwidth_GBps",
                               "makes nic.port_bandwidth_Gbps 0.0008"),
    "timeline-devices-999": (lambda p: plots.timeline(_breakdown(p), devices=[999]), "devices",
                             "rank 999 does not exist: ranks 0..7"),
    "trace-max-devices-0": (lambda p: trace.chrome_trace(_breakdown(p), max_devices=0), "max_devices",
                            "an integer >= 1, got 0"),
    "timeline-of-a-nan-breakdown": (lambda p: plots.timeline(_breakdown(p, nan=True)), "breakdown",
                                    "has a step time of nan s"),
    "trace-of-a-nan-breakdown": (lambda p: trace.chrome_trace(_breakdown(p, nan=True)), "breakdown",
                                 "a timeline needs finite times"),
    "plan-save-name-of-300-characters": (lambda p: p[2].save("/tmp/" + "p" * 300 + ".json"), "",
                                         "cannot be written: File name too long"),
    "save-figure-unknown-format": (lambda p: plots.save_figure(_figure(), "x.xyz"), "", "is not a figure name"),
    "random-plans-key-an-int": (lambda p: pm.random_plans(0, p[0], p[1], n=2), "key",
                                "must be a jax random key (jax.random.key(seed)), got int 0"),
    "evaluate-plan-arrays-holding-nan": (lambda p: pm.evaluate(p[0], p[1], _arrays(p, cache_ratio=np.nan)),
                                         "plan.cache_ratio", "holds NaN or infinite entries"),
    "evaluate-plan-arrays-a-probability-above-1": (lambda p: pm.evaluate(p[0], p[1], _arrays(p, shard_type=2.0)),
                                                   "plan.shard_type", "holds 0 to 2; it is a probability or a fraction"),
    "evaluate-plan-arrays-no-buckets": (lambda p: pm.evaluate(p[0], p[1], _arrays(p, grad_buckets=0.0)),
                                        "plan.grad_buckets", "holds 0; it counts shards, buckets or chunks, at least 1"),
    "evaluate-plan-arrays-of-another-system": (lambda p: pm.evaluate(MTIA16(), p[1], _arrays(p)), "plan.placement",
                                               "has shape (8, 8); this model and system need (..., 8, 16)"),
    "sensitivity-of-a-system-priced-at-0": (lambda p: pm.sensitivity(_priced(p[0], 0.0), p[1], plan="greedy",
                                                                      metric="usd_per_million_samples"),
                                            "usd_per_hour, host_usd_per_hour", "are both 0, so the cost is 0"),
}


def _arrays(problem, **scale):
    """The data-parallel plan's PlanArrays with the named fields multiplied by a factor."""
    import dataclasses
    pa = pm.to_arrays(problem[2], problem[0], problem[1])
    return dataclasses.replace(pa, **{k: np.asarray(getattr(pa, k)) * v for k, v in scale.items()})


def _priced(system, usd_per_hour):
    """`system` with its chips and hosts both at usd_per_hour."""
    import dataclasses
    return dataclasses.replace(system, host_usd_per_hour=np.float32(usd_per_hour),
                               chip=dataclasses.replace(system.chip, usd_per_hour=np.float32(usd_per_hour)))


def _figure():
    from matplotlib.figure import Figure
    return Figure()

_BD = {}


def _breakdown(problem, nan: bool = False):
    """The Breakdown of the data-parallel plan on h100-8 / dlrm-small (once), or it with NaN times."""
    if "bd" not in _BD:
        _BD["bd"] = pm.evaluate(*problem)
    bd = _BD["bd"]
    return jax.tree_util.tree_map(lambda x: x * np.float32("nan"), bd) if nan else bd


@pytest.mark.parametrize("case", list(API_CASES))
def test_a_bad_python_argument_is_one_config_error(case, problem):
    call, field, piece = API_CASES[case]
    with pytest.raises(pm.ConfigError) as info:
        call(problem)
    assert info.value.field == field and "\n" not in str(info.value)
    assert piece in str(info.value), str(info.value)


def test_default_plan_takes_preset_names_as_evaluate_does(problem):
    named = pm.default_plan("h100-8", "dlrm-small")
    assert named == pm.default_plan(*problem[:2])
    assert np.isfinite(float(pm.evaluate("h100-8", "dlrm-small", named).step_s))
