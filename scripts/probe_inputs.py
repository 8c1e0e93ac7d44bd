"""Bad or odd inputs, tried as a new user would: each case ends in a clean error, valid output, or BAD.

    PYTHONPATH=. python scripts/probe_inputs.py              # every case (minutes: each CLI case is a process)
    PYTHONPATH=. python scripts/probe_inputs.py --only hugectr --verbose
    PYTHONPATH=. python scripts/probe_inputs.py --list       # the cases, without running them

The surfaces: the uncertainty flags and a chip file's `<key>_range` syntax, 2D plans (replicas,
sync_every, group_layout) on the command line and in plan files, HugeCTR recipes, steps CSVs, output
paths (an existing file, a folder, a missing folder, /dev/full, stdout on a full disk or closed) and
DMPCollection's arguments. The command line runs as a process (`python -m perfmodel`, a timeout each);
the Python API in this process.

Verdicts:
  clean  exit code 2 and one `error:` line on stderr (a ConfigError, or argparse's usage error); in
         Python, one ConfigError of one line
  valid  exit code 0 (141 for a reader gone) and no NaN or inf in the output; in Python, a result
         without NaN (or the ImportError that asks for torchrec, once every check has passed)
  BAD    a traceback, "Exception ignored", another exit code, a timeout, NaN or inf in a result

Cases stay cheap: h100-8 / h100-16 and dlrm-small, --plan greedy, --method greedy, few draws. Exit
code 1 when any case is BAD. Not a test: it takes minutes and the cases are a user's, not assertions.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
NAN = re.compile(r"\b(nan|inf|infinity)\b", re.I)
TRACEBACK = ("Traceback (most recent call last)", "Exception ignored")

S8 = ["--system", "h100-8", "--model", "dlrm-small"]
S16 = ["--system", "h100-16", "--model", "dlrm-small"]
GREEDY = ["--plan", "greedy"]


@dataclass
class Cli:
    """`python -m perfmodel *argv` in a fresh folder holding `files`; stdout to a pipe, "full"
    (/dev/full) or "closed"."""

    name: str
    argv: list[str]
    files: dict[str, str | bytes] = field(default_factory=dict)
    stdout: str = "pipe"


@dataclass
class Api:
    """fn(folder) in this process; `folder` is a fresh temporary folder."""

    name: str
    fn: Callable[[Path], object]


# ------------------------------------------------------------------------------------------ files

STEPS_HEADER = ("system,model,global_batch,dense_dtype,comm_precisions,in_network_reduction,plan_settings,"
                "ms_per_step,run,source\n")
STEPS_OK = "h100ib-8,dlrm-dcnv2-mlperf,55296,fp16,fp32,no,{settings},{ms},r,s\n"


def steps_row(settings: str = "", ms: str = "3.5", **over) -> str:
    cols = dict(system="h100ib-8", model="dlrm-dcnv2-mlperf", global_batch="55296", dense_dtype="fp16",
                comm_precisions="fp32", in_network_reduction="no", plan_settings=settings, ms_per_step=ms,
                run="r", source="s")
    cols.update(over)
    return STEPS_HEADER + ",".join(cols.values()) + "\n"


def chip_file(key: str, value: str) -> str:
    """data/chips/h100.toml with `key = value` in place of the line that sets key (or added to its
    [compute] table)."""
    text = (REPO / "data" / "chips" / "h100.toml").read_text()
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.match(rf"{re.escape(key)}\s*=", line):
            lines[i] = f"{key} = {value}"
            return "\n".join(lines) + "\n"
    i = lines.index("[compute]")
    lines.insert(i + 1, f"{key} = {value}")
    return "\n".join(lines) + "\n"


_PLAN = {}


def plan_dict() -> dict:
    """The greedy plan of h100-8 / dlrm-small as a dict (once)."""
    if not _PLAN:
        import perfmodel as pm
        _PLAN["plan"] = pm.greedy_plan(pm.load_system("h100-8"), pm.load_model("dlrm-small")).to_dict()
    return json.loads(json.dumps(_PLAN["plan"]))


def plan_json(**over) -> str:
    d = plan_dict()
    d.update(over)
    return json.dumps(d)


def plan_json_raw(key: str, token: str) -> str:
    """The plan's JSON with `"key": token` first, token as written (NaN, Infinity: not JSON's own)."""
    return "{" + f'"{key}": {token}, ' + json.dumps({k: v for k, v in plan_dict().items() if k != key})[1:]


# ------------------------------------------------------------------------------------------ cases

def uncertainty_cases() -> list:
    out = []
    ev = ["evaluate", *S8, *GREEDY]
    for n in ("0", "-1", "abc", "2.5", "nan", "inf", "1e9", "100001", "1", "999999999999999999999"):
        out.append(Cli(f"uncertainty/evaluate --uncertainty {n}", [*ev, "--uncertainty", n]))
    out.append(Cli("uncertainty/evaluate --uncertainty 20 (valid)", [*ev, "--uncertainty", "20"]))
    out.append(Cli("uncertainty/evaluate --uncertainty 20 --json (valid)", [*ev, "--uncertainty", "20", "--json"]))
    out.append(Cli("uncertainty/evaluate --uncertainty (default)", [*ev, "--uncertainty", "--no-model-error"]))
    for s in ("-1", "abc", "1.5", "nan", "99999999999999999999999", ""):
        out.append(Cli(f"uncertainty/evaluate --uncertainty-seed {s!r}", [*ev, "--uncertainty", "20", "--uncertainty-seed", s]))
    out.append(Cli("uncertainty/--no-model-error without --uncertainty", [*ev, "--no-model-error"]))
    out.append(Cli("uncertainty/--uncertainty-seed without --uncertainty", [*ev, "--uncertainty-seed", "3"]))
    un = ["uncertainty", *S8, *GREEDY]
    for d in ("0", "-5", "abc", "1e12", "2.5", "nan", "3"):
        out.append(Cli(f"uncertainty/uncertainty --draws {d}", [*un, "--draws", d]))
    out.append(Cli("uncertainty/uncertainty --figure bogus", [*un, "--figure", "bogus"]))
    for t in ("-1", "abc", "1.5"):
        out.append(Cli(f"uncertainty/uncertainty --top {t}", [*un, "--top", t, "--draws", "16"]))
    out.append(Cli("uncertainty/uncertainty --inputs (valid)", [*un, "--inputs"]))
    out.append(Cli("uncertainty/uncertainty --inputs --json (valid)", [*un, "--inputs", "--json"]))
    out.append(Cli("uncertainty/uncertainty without --system", ["uncertainty", "--model", "dlrm-small", "--draws", "8"]))
    out.append(Cli("uncertainty/uncertainty --draws 16 (valid)", [*un, "--draws", "16"]))
    out.append(Cli("uncertainty/search --draws 0", ["search", *S8, "--method", "greedy", "--draws", "0"]))
    out.append(Cli("uncertainty/search --draws abc", ["search", *S8, "--method", "greedy", "--draws", "abc"]))
    out.append(Cli("uncertainty/search --objective bogus", ["search", *S8, "--method", "greedy", "--objective", "bogus"]))
    out.append(Cli("uncertainty/search --objective p200", ["search", *S8, "--method", "greedy", "--objective", "p200"]))
    out.append(Cli("uncertainty/search --objective p-5", ["search", *S8, "--method", "greedy", "--objective", "p-5"]))
    out.append(Cli("uncertainty/search --objective pnan", ["search", *S8, "--method", "greedy", "--objective", "pnan"]))
    # a chip file's ranges
    key = "matmul_efficiency_max_range"
    for value in ('"20%"', '"-5%"', '"100%"', '"abc"', '"20"', '"%"', '"nan%"', '"inf%"', '"1e3%"', "[0.1]",
                  "[0.9, 0.1]", "[0.1, 0.2]", "[0.7, 0.9, 1.0]", "nan", "[nan, 0.9]", "[0.7, inf]", "true", "{}",
                  "[]", '["a", "b"]', "0.5", "[0.7, 0.9]"):
        out.append(Cli(f"range/{key} = {value}", ["evaluate", *S8, *GREEDY, "--chip", "chip.toml", "--uncertainty", "16"],
                       {"chip.toml": chip_file(key, value)}))
    out.append(Cli("range/a range on a key that takes none (bogus_range)",
                   ["evaluate", *S8, *GREEDY, "--chip", "chip.toml"], {"chip.toml": chip_file("bogus_range", '"10%"')}))
    out.append(Cli("range/a range on a count (matmul_efficiency_max_range on a string)",
                   ["evaluate", *S8, *GREEDY, "--chip", "chip.toml"],
                   {"chip.toml": chip_file("matmul_efficiency_max", '"0.8"')}))
    return out


def twod_cases() -> list:
    out = []
    se = ["search", *S16, "--method", "greedy"]
    for r in ("0", "-1", "3", "abc", "2.5", "16", "32", "1e9", "nan", "", "99999999999999999999"):
        out.append(Cli(f"2d/search --replicas {r!r}", [*se, "--replicas", r]))
    out.append(Cli("2d/search --replicas 2 (valid)", [*se, "--replicas", "2", "--json"]))
    out.append(Cli("2d/search --replicas 2 contiguous (valid)", [*se, "--replicas", "2", "--group-layout", "contiguous"]))
    out.append(Cli("2d/search --group-layout bogus", [*se, "--replicas", "2", "--group-layout", "bogus"]))
    for k in ("0", "-3", "abc", "2.5", "1e9", "inf", "nan", "1000001"):
        out.append(Cli(f"2d/search --sync-every {k}", [*se, "--replicas", "2", "--sync-every", k]))
    out.append(Cli("2d/search --sync-every 4 (valid)", [*se, "--replicas", "2", "--sync-every", "4"]))
    out.append(Cli("2d/search --sync-every 4 on one replica", [*se, "--sync-every", "4"]))
    out.append(Cli("2d/uncertainty --replicas 3", ["uncertainty", *S16, *GREEDY, "--replicas", "3", "--draws", "16"]))
    out.append(Cli("2d/uncertainty --sync-every 0", ["uncertainty", *S16, *GREEDY, "--replicas", "2", "--sync-every", "0"]))
    ev = ["evaluate", *S8, "--plan", "plan.json"]
    for fld, value in (("replicas", 0), ("replicas", -1), ("replicas", "2"), ("replicas", 2.5), ("replicas", True),
                       ("replicas", None), ("replicas", 3), ("replicas", 2), ("replicas", 10**30),
                       ("sync_every", 0), ("sync_every", -1), ("sync_every", 2.5), ("sync_every", "x"),
                       ("sync_every", 1e30), ("sync_every", True), ("sync_every", 10**7),
                       ("group_layout", "bogus"), ("group_layout", 5), ("group_layout", None), ("group_layout", "")):
        out.append(Cli(f"2d/plan file {fld} = {value!r}", ev, {"plan.json": lambda f=fld, v=value: plan_json(**{f: v})}))
    for key, token in (("replicas", "NaN"), ("sync_every", "Infinity"), ("replicas", "-Infinity"), ("group_layout", "NaN")):
        out.append(Cli(f"2d/plan file {key} = {token}", ev, {"plan.json": lambda k=key, t=token: plan_json_raw(k, t)}))

    def api_group(**kw):
        def fn(_):
            import perfmodel as pm
            return pm.sharding_group(pm.load_system("h100-16"), **kw)
        return fn
    for kw in (dict(replicas=0), dict(replicas=3), dict(replicas="2"), dict(replicas=2.0), dict(replicas=True),
               dict(replicas=2, layout="bogus"), dict(replicas=2, sync_every=0), dict(replicas=2, sync_every=2.5),
               dict(replicas=2, sync_every=float("inf")), dict(replicas=2)):
        out.append(Api(f"2d/pm.sharding_group(h100-16, {kw})", api_group(**kw)))

    def api_plan(**kw):
        def fn(_):
            import perfmodel as pm
            d = plan_dict()
            d.update(kw)
            return pm.plan_from_dict(d, pm.load_system("h100-8"), pm.load_model("dlrm-small"))
        return fn
    for kw in (dict(replicas=float("nan")), dict(sync_every=float("inf")), dict(group_layout=["strided"]),
               dict(replicas=[2]), dict(sync_every=-(10**20))):
        out.append(Api(f"2d/pm.plan_from_dict({kw})", api_plan(**kw)))
    return out


def hugectr_cases() -> list:
    out = []
    se = ["search", *S8, "--json", "--method"]
    for m in ("hugectr:auto:-1", "hugectr:auto:nan", "hugectr:auto:inf", "hugectr:auto:abc", "hugectr:auto:7:-1",
              "hugectr:auto:7:nan", "hugectr:auto:7:abc", "hugectr:bogus", "hugectr:auto:7:0.008:1", "hugectr:",
              "HUGECTR:auto", "hugectr:auto:0", "hugectr:auto:1e400", "hugectr::7", "hugectr:auto:7:", ":auto",
              "hugectr:hier_auto:7:1e400", "torchrec:auto"):
        out.append(Cli(f"hugectr/search --method {m}", [*se, m]))
    for m in ("hugectr", "hugectr:round_robin", "hugectr:uniform", "hugectr: auto : 7 ", "hugectr:auto:7:0"):
        out.append(Cli(f"hugectr/search --method {m!r} (valid)", [*se, m]))

    def api(*args, system="h100-8", model="dlrm-small"):
        def fn(_):
            import perfmodel as pm
            return pm.hugectr_plan(system, model, *args)
        return fn
    for args in (("auto", -1), ("auto", float("nan")), ("auto", 7, float("nan")), ("auto", "7"), ("auto", None),
                 ("auto", 7, "0.008"), ("auto", True), ("auto", float("inf")), ("auto", 7, -1), ("bogus",),
                 (None,), ("auto", 7, float("inf")), ("auto", 0), ("auto",), ("round_robin", 7, 0.0),
                 ("hier_auto",), ("uniform", 1e300)):
        out.append(Api(f"hugectr/pm.hugectr_plan(h100-8, dlrm-small, {', '.join(map(repr, args))})", api(*args)))
    out.append(Api("hugectr/pm.hugectr_plan(system='nope-8')", api("auto", system="nope-8")))
    out.append(Api("hugectr/pm.hugectr_plan(model=None)", api("auto", model=None)))
    return out


def steps_cases() -> list:
    """A steps CSV through the Python loader (no search is run), and some through `validate`."""
    csvs = {
        "duplicate dense": steps_row("dense=replicated;dense=fully_sharded"),
        "duplicate planner": steps_row("planner=hugectr:auto:7;planner=hugectr:uniform"),
        "duplicate chunks with spaces": steps_row(" overlap_chunks = 2 ; overlap_chunks=4"),
        "setting without value": steps_row("dense="),
        "setting without =": steps_row("dense"),
        "only =": steps_row("="),
        "only semicolons": steps_row(";;;"),
        "unknown setting": steps_row("chunks=2"),
        "overlap_chunks 1e9": steps_row("overlap_chunks=1000000000"),
        "overlap_chunks nan": steps_row("overlap_chunks=nan"),
        "grad_buckets -1": steps_row("grad_buckets=-1"),
        "pipeline maybe": steps_row("pipeline=maybe"),
        "offload 1": steps_row("offload=1"),
        "planner bad ratio": steps_row("planner=hugectr:auto:-1"),
        "planner nan threshold": steps_row("planner=hugectr:auto:7:nan"),
        "planner no type": steps_row("planner=hugectr"),
        "planner without plan_source": steps_row("planner=hugectr:auto:7:0.008"),
        "ms 0": steps_row(ms="0"),
        "ms -1": steps_row(ms="-1"),
        "ms nan": steps_row(ms="nan"),
        "ms inf": steps_row(ms="inf"),
        "ms abc": steps_row(ms="abc"),
        "ms empty": steps_row(ms=""),
        "ms 1e400": steps_row(ms="1e400"),
        "batch 2.5": steps_row(global_batch="2.5"),
        "batch 0": steps_row(global_batch="0"),
        "batch 1e30": steps_row(global_batch="1e30"),
        "unknown system": steps_row(system="nope-8"),
        "unknown model": steps_row(model="nope"),
        "system path missing": steps_row(system="missing.toml"),
        "dtype bogus": steps_row(dense_dtype="fp64"),
        "precisions empty": steps_row(comm_precisions=""),
        "precisions bogus": steps_row(comm_precisions="int4"),
        "in-network maybe": steps_row(in_network_reduction="maybe"),
        "in-network yes without switch reduction": steps_row(in_network_reduction="yes"),
        "source empty": steps_row(source=""),
        "header only": STEPS_HEADER,
        "empty file": "",
        "missing column": STEPS_HEADER.replace("ms_per_step,", "") + "h100ib-8,dlrm-dcnv2-mlperf,55296,fp16,fp32,no,,r,s\n",
        "extra cell": steps_row().rstrip("\n") + ",extra\n",
        "short row": STEPS_HEADER + "h100ib-8,dlrm-dcnv2-mlperf\n",
        "not UTF-8": STEPS_HEADER.encode() + b"\xff\xfe,\n",
        "NUL byte": STEPS_HEADER + "h100ib-8\x00,dlrm-dcnv2-mlperf,55296,fp16,fp32,no,,3.5,r,s\n",
        "BOM and CRLF (valid)": "\ufeff" + steps_row().replace("\n", "\r\n"),
        "quoted settings (valid)": steps_row('"dense=replicated; overlap_chunks=2"'),
        "hybrid on uneven domains": steps_row("dense=hybrid", system="mtia300-40", model="dlrm-small"),
    }
    out = []

    def api(text):
        def fn(folder):
            from perfmodel.validate.steps import load_step_datasets
            sub = folder / "steps"
            sub.mkdir()
            (sub / "runs.csv").write_bytes(text if isinstance(text, bytes) else text.encode())
            return [[r.__dict__ for r in d.rows] for d in load_step_datasets(sub)]
        return fn
    for name, text in csvs.items():
        out.append(Api(f"steps/load_step_datasets: {name}", api(text)))
    for name in ("duplicate dense", "planner bad ratio", "ms nan", "unknown system", "not UTF-8", "missing column",
                 "empty file", "NUL byte", "header only"):
        out.append(Cli(f"steps/validate --kind steps: {name}", ["validate", "--kind", "steps", "--data", "data"],
                       {"data/steps/runs.csv": csvs[name]}))
    out.append(Cli("steps/validate --data missing folder", ["validate", "--kind", "steps", "--data", "nowhere"]))
    out.append(Cli("steps/validate --data a file", ["validate", "--kind", "steps", "--data", "f.csv"], {"f.csv": "x\n"}))
    out.append(Cli("steps/validate --dataset nope", ["validate", "--kind", "steps", "--dataset", "nope"]))
    out.append(Cli("steps/validate --kind bogus", ["validate", "--kind", "bogus"]))
    return out


def output_cases() -> list:
    out = []
    existing = {"taken.json": "{}\n", "taken.png": "x", "dir/keep": ""}
    places = {"existing file": "taken.json", "folder": "dir", "missing folder": "nowhere/p.json", "/dev/full": "/dev/full",
              "empty name": "", "a name of 300 characters": "p" * 300 + ".json", "/proc/self/p.json": "/proc/self/p.json",
              "/sys/p.json": "/sys/p.json", "trailing slash": "new/", "/ (root)": "/", "dash": "-"}
    for what, path in places.items():
        out.append(Cli(f"output/search --out {what}", ["search", *S8, "--method", "greedy", "--out", path], existing))
    for what in ("existing file", "folder", "missing folder", "/dev/full", "empty name", "/proc/self/p.json"):
        out.append(Cli(f"output/evaluate --save-plan {what}", ["evaluate", *S8, *GREEDY, "--save-plan", places[what]],
                       existing))
    for what, path in (("existing file", "taken.png"), ("wrong suffix", "fig.txt"), ("folder", "dir"),
                       ("/dev/full", "/dev/full"), ("missing folder", "nowhere/f.png")):
        out.append(Cli(f"output/plot breakdown --out {what}", ["plot", "breakdown", *S8, *GREEDY, "--out", path], existing))
    for what, path in (("existing file", "taken.json"), ("folder", "dir"), ("/dev/full", "/dev/full")):
        out.append(Cli(f"output/trace --out {what}", ["trace", *S8, *GREEDY, "--out", path], existing))
        out.append(Cli(f"output/schema --markdown {what}", ["schema", "--markdown", path], existing))
    out.append(Cli("output/search --out new file (valid)", ["search", *S8, "--method", "greedy", "--out", "new.json"]))
    out.append(Cli("output/search --out p.json --format torchrec (valid)",
                   ["search", *S8, "--method", "greedy", "--out", "p.json", "--format", "torchrec"]))
    out.append(Cli("output/search --format bogus", ["search", *S8, "--method", "greedy", "--out", "p.json", "--format", "bogus"]))
    out.append(Cli("output/schema --markdown /dev/zero", ["schema", "--markdown", "/dev/zero"]))
    out.append(Cli("output/schema --markdown new file (valid)", ["schema", "--markdown", "ref.md"]))
    for argv in (["list"], ["list", "--json"], ["cache"], ["evaluate", *S8, *GREEDY, "--json"], ["evaluate", *S8, *GREEDY],
                 ["search", *S8, "--method", "greedy"], ["uncertainty", *S8, *GREEDY, "--inputs"],
                 ["uncertainty", *S8, *GREEDY, "--draws", "16", "--json"], ["validate", "--kind", "contention"],
                 ["evaluate", *S8, *GREEDY, "--uncertainty", "16"]):
        out.append(Cli(f"output/stdout on a full disk: {' '.join(argv)}", argv, stdout="full"))
    for argv in (["list"], ["evaluate", *S8, *GREEDY]):
        out.append(Cli(f"output/stdout closed: {' '.join(argv)}", argv, stdout="closed"))
    return out


def dmp_cases() -> list:
    base = {"plan": {"m": {"t": {"sharding_type": "table_wise", "compute_kernel": "fused", "ranks": [0]}}},
            "world_size": 16, "sharding_group_size": 8, "use_inter_host_allreduce": False, "sync_every": 2}

    def api(data, src="p.json"):
        def fn(folder):
            import perfmodel as pm
            if isinstance(data, str):
                path = folder / "p.json"
                path.write_text(data)
                return pm.dmp_collection_args(path)
            return pm.dmp_collection_args(data, src=src)
        return fn
    out = []
    for fld, value in (("sync_every", -5), ("sync_every", 2.7), ("sync_every", float("inf")), ("sync_every", float("nan")),
                       ("sync_every", "2"), ("sync_every", True), ("sync_every", 0), ("sync_every", 10**30),
                       ("use_inter_host_allreduce", "no"), ("use_inter_host_allreduce", 1), ("use_inter_host_allreduce", None),
                       ("world_size", True), ("world_size", 16.0), ("world_size", -16), ("world_size", "16"),
                       ("sharding_group_size", 3), ("sharding_group_size", 0), ("sharding_group_size", 32),
                       ("sharding_group_size", 8.0), ("plan", {}), ("plan", [])):
        out.append(Api(f"dmp/dmp_collection_args({fld}={value!r})", api({**base, fld: value})))
    out.append(Api("dmp/dmp_collection_args(no world_size)", api({k: v for k, v in base.items() if k != "world_size"})))
    out.append(Api("dmp/dmp_collection_args(a list)", api([1, 2])))
    out.append(Api("dmp/dmp_collection_args(valid; needs torchrec)", api(base)))
    out.append(Api("dmp/dmp_collection_args(a JSON file with NaN)", api(json.dumps(base).replace('"sync_every": 2', '"sync_every": NaN'))))
    out.append(Api("dmp/dmp_collection_args(a missing file)", lambda f: __import__("perfmodel").dmp_collection_args(f / "none.json")))
    return out


def all_cases() -> list:
    return uncertainty_cases() + twod_cases() + hugectr_cases() + steps_cases() + output_cases() + dmp_cases()


# ------------------------------------------------------------------------------------------ running

def has_nan(x) -> bool:
    """Whether a result holds a NaN or an infinity anywhere (dicts, lists, dataclasses, arrays)."""
    import numpy as np
    if isinstance(x, dict):
        return any(has_nan(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return any(has_nan(v) for v in x)
    if hasattr(x, "__dataclass_fields__"):
        return any(has_nan(getattr(x, f)) for f in x.__dataclass_fields__)
    if isinstance(x, (bool, str, type(None))):
        return False
    try:
        a = np.asarray(x)
    except Exception:                  # noqa: BLE001 - an object with no numbers
        return False
    return a.dtype.kind in "fc" and not bool(np.all(np.isfinite(a)))


def run_cli(case: Cli, folder: Path, timeout: float) -> tuple[str, str]:
    for name, text in case.files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        text = text() if callable(text) else text
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "perfmodel", *case.argv]
    if case.stdout == "closed":
        cmd = ["sh", "-c", 'exec "$@" >&-', "sh", *cmd]
    try:
        with open("/dev/full", "w") if case.stdout == "full" else open(os.devnull, "w") as sink:
            done = subprocess.run(cmd, cwd=folder, env=env, timeout=timeout, text=True, errors="replace",
                                  stdout=sink if case.stdout == "full" else subprocess.PIPE, stderr=subprocess.PIPE)
    except subprocess.TimeoutExpired:
        return "BAD", f"no answer in {timeout:g} s"
    out, err, rc = done.stdout or "", done.stderr, done.returncode
    if any(t in err for t in TRACEBACK):
        return "BAD", f"exit {rc}, traceback: {last_line(err)}"
    errors = [ln for ln in err.splitlines() if "error:" in ln]
    if rc == 2:
        if len(errors) == 1:
            return "clean", errors[0]
        return "BAD", f"exit 2 with {len(errors)} error lines: {last_line(err)}"
    if rc in (0, 141):
        if NAN.search(out):
            return "BAD", f"exit {rc} with NaN or inf in the output: {NAN.search(out).group(0)!r}"
        return "valid", f"exit {rc}, {len(out.splitlines())} lines"
    return "BAD", f"exit {rc}: {last_line(err)}"


def run_api(case: Api, folder: Path) -> tuple[str, str]:
    from perfmodel.config import ConfigError
    try:
        result = case.fn(folder)
    except ConfigError as err:
        if "\n" in str(err):
            return "BAD", f"a ConfigError of several lines: {str(err)[:200]!r}"
        return "clean", str(err)
    except ImportError as err:
        if "torchrec" in str(err):
            return "valid", "every check passed; the rest needs torchrec"
        return "BAD", f"ImportError: {err}"
    except Exception as err:           # noqa: BLE001 - any other exception is the finding
        return "BAD", f"{type(err).__name__}: {str(err)[:300]}"
    if has_nan(result):
        return "BAD", "a result with NaN or inf"
    return "valid", type(result).__name__


def last_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "(nothing on stderr)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], help="run the cases whose name holds this text")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds a command may take (default 240)")
    parser.add_argument("--list", action="store_true", help="list the cases and stop")
    parser.add_argument("--verbose", action="store_true", help="print every case, not only the BAD ones")
    args = parser.parse_args()
    cases = [c for c in all_cases() if not args.only or any(o in c.name for o in args.only)]
    if args.list:
        print("\n".join(f"{'cli' if isinstance(c, Cli) else 'api'}  {c.name}" for c in cases))
        print(f"{len(cases)} cases")
        return 0
    counts: dict[str, int] = {"clean": 0, "valid": 0, "BAD": 0}
    bad = []
    t0 = time.monotonic()
    for i, case in enumerate(cases, 1):
        folder = Path(tempfile.mkdtemp(prefix="probe-"))
        try:
            verdict, detail = run_cli(case, folder, args.timeout) if isinstance(case, Cli) else run_api(case, folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        counts[verdict] += 1
        if verdict == "BAD":
            bad.append((case.name, detail))
        if args.verbose or verdict == "BAD":
            print(f"[{i}/{len(cases)}] {verdict:<5} {case.name}: {detail}", flush=True)
        elif i % 20 == 0:
            print(f"[{i}/{len(cases)}] ... {time.monotonic() - t0:.0f} s", flush=True)
    print(f"\n{len(cases)} cases in {time.monotonic() - t0:.0f} s: {counts['clean']} clean errors, "
          f"{counts['valid']} valid outputs, {counts['BAD']} BAD")
    for name, detail in bad:
        print(f"  BAD {name}: {detail}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
