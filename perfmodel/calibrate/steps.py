"""Your own runs in: `perfmodel calibrate --steps my_runs.csv --out DIR`.

The CSV holds measured training steps of your cluster in the step validation's format
(data/measurements/steps/*.csv, read by validate.steps.load_step_file: system preset, model preset,
global batch, precisions, the run's fixed plan settings, measured ms per step, source), each row
with the plan its run used: its planner recipe (plan_settings planner=hugectr:PLAN:RATIO:THRESHOLD_GB,
as the validation prices a run) or, in an optional `plan_file` column, a plan JSON (relative to the
CSV's folder). The shared parameters of the validation (validate.steps.PARAMETERS: the dense GEMMs'
efficiency, the embedding kernels' random-row efficiency, the collectives' latencies, each a log
scale) are fitted through the model by the validation's own fit (validate.steps.fit) on every row,
each row's plan held. The fitted scales are written into copies of the presets the rows name:

  DIR/<chip>.chip.toml     the chip of the rows' systems, its fitted numbers replaced
  DIR/<system>.toml        each system of the rows (its size first), pointing at the chip above

Every fitted number says where it came from (the CSV, its rows, the date, the base value and the
scale) and carries a range: with two or more rows the spread of the leave-one-row-out fits (the
validation's fold spread); with one row, which fits one combination of the three scales and so
cannot tell them apart, the base preset's own range moved by the fitted scale. The files are new
(files.write_new; DIR may exist, but none of the files in it). The report gives each row's error
before (the presets as shipped) and after (the written files, loaded back), and the 80 % interval
(p10 to p90) that `perfmodel evaluate --uncertainty` gives at the row's plan, before and after.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import re
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from ..config import MAX_RELATIVE_RANGE, RANGE_SUFFIX, ConfigError, read_file
from ..files import check_output, write_new
from ..schema import CHIP, SYSTEM

# The preset fields each shared parameter scales (validate.steps.scaled): chip file (section, key).
CHIP_FIELDS = {
    "gemm": (("compute", "matmul_efficiency_max"),),
    "gather": (("memory", "gather_efficiency_max"),),
    "latency": (("compute", "launch_overhead_us"), ("scale_up", "latency_us"), ("core_collectives", "call_overhead_us"),
                ("nic", "latency_us"), ("nic", "per_message_overhead_us"), ("nic", "pcie_latency_us")),
}
# a field whose default is another fitted field's value: left out where the base leaves it out
FOLLOWS = {("core_collectives", "call_overhead_us")}
NIC_LATENCIES = ("latency_us", "per_message_overhead_us", "pcie_latency_us")
CAPPED = {"gemm", "gather"}          # efficiencies: scaled() caps them at 1
PLAN_FILE = "plan_file"
LEAF = {"gemm": "matmul_eff_max", "gather": "gather_eff_max"}
FAR = 0.02                           # a row this far off after the fit: the report says the scales could not reach it


@dataclasses.dataclass
class Target:
    """One measured row with the problem and plan it is priced at."""

    row: object                      # validate.steps.StepRow
    system: object
    model: object
    plan: object
    line: int


# ------------------------------------------------------------------------------------- reading

def read_targets(path: str | Path) -> list[Target]:
    """The rows of a steps CSV with their plans; one ConfigError naming the row for a row with no
    plan, two plans, or a plan that does not fit its system's memory."""
    from ..evaluate import evaluate
    from ..plan import load_plan
    from ..validate.csvfile import read_rows
    from ..validate.steps import COLUMNS, load_step_file, problem, run_plan
    path = Path(path)
    ds = load_step_file(path)
    raws = [raw for _, raw in read_rows(path, COLUMNS, "step dataset")]
    out = []
    for row, raw in zip(ds.rows, raws):
        where = row.where
        plan_file = (raw.get(PLAN_FILE) or "").strip()
        system, model = problem(row)
        if plan_file and row.planner is not None:
            raise ConfigError(where, PLAN_FILE, "is given beside a planner in plan_settings; give one of the two")
        if plan_file:
            p = Path(plan_file)
            plan = load_plan(p if p.is_absolute() else path.parent / p, system, model)
            field = PLAN_FILE
        elif row.planner is not None:
            plan = run_plan(system, model, row)
            field = "plan_settings"
        else:
            raise ConfigError(where, "plan_settings", "names no planner, and the row has no plan_file: calibrate fits at "
                              "each run's own plan (planner=hugectr:PLAN:RATIO:THRESHOLD_GB, or a plan JSON in a "
                              f"{PLAN_FILE} column)")
        bd = evaluate(system, model, plan)
        if not bool(bd.feasible):
            need = float(jnp.max(bd.memory_bytes)) / 1e9
            have = float(bd.capacity_bytes) / 1e9
            raise ConfigError(where, field, f"the run's plan does not fit {row.system}: {need:.1f} GB on its fullest "
                              f"chip, {have:.1f} GB usable; check the row's system, batch and plan")
        out.append(Target(row, system, model, plan, int(where.rsplit(":", 1)[1])))
    return out


# ------------------------------------------------------------------------------------- outputs

def output_names(targets: list[Target]) -> tuple[dict[str, str], dict[str, str]]:
    """({chip preset name: file name}, {system name: file name}) of what calibrate writes."""
    chips, systems, seen = {}, {}, {}
    for t in targets:
        for kind, path in (("chip", Path(t.system.files[1])), ("system", Path(t.system.files[0]))):
            other = seen.setdefault((kind, path.stem), path.resolve())
            if other != path.resolve():
                raise ConfigError(t.row.where, "system", f"its {kind} file {str(path)!r} and {str(other)!r} share the "
                                  f"name {path.stem!r}; the calibrated files are named by it: rename one")
        chips.setdefault(Path(t.system.files[1]).stem, f"{Path(t.system.files[1]).stem}.chip.toml")
        systems.setdefault(t.row.system, f"{Path(t.row.system).stem}.toml")
    return chips, systems


def check_outputs(out_dir: Path, names: list[str]) -> None:
    """DIR and every file to write in it, checked before the fit: DIR is a folder (or does not exist
    yet, in a folder that does), and none of the files exists (results never replace a file)."""
    if str(out_dir) == "":
        raise ConfigError("", "out", "is empty; give the folder to write the calibrated presets in")
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(str(out_dir), "out", "is a file; give a folder (new, or one without the files to write)")
    if not out_dir.exists():
        if not out_dir.parent.is_dir():
            raise ConfigError(str(out_dir), "out", f"its folder {str(out_dir.parent)!r} does not exist")
        return
    taken = [n for n in names if (out_dir / n).exists() or (out_dir / n).is_symlink()]
    if taken:
        raise ConfigError(str(out_dir / taken[0]), "", "exists already; calibrate never replaces a file: choose another "
                          f"--out folder or remove {', '.join(taken)} first")
    for n in names:
        check_output(out_dir / n, (".toml",), "preset TOML")


# ------------------------------------------------------------------------------------- the fit

def fit_scales(targets: list[Target], iterations: int | None = None, folds: bool = True, log=lambda m: None):
    """(theta on all rows, [theta of each leave-one-row-out fit] or [] with one row)."""
    from ..validate.steps import FIT_STEPS, fit
    rows, plans = [t.row for t in targets], [t.plan for t in targets]
    it = iterations or FIT_STEPS
    log(f"fitting {', '.join(_params())} on {len(rows)} row{'s' * (len(rows) != 1)}")
    theta = fit(rows, plans, [1.0] * len(rows), it)
    spread = []
    if folds and len(rows) > 1:
        for i in range(len(rows)):
            log(f"fitting without row {targets[i].line} (the range's fold spread)")
            spread.append(fit(rows, plans, [0.0 if j == i else 1.0 for j in range(len(rows))], it))
    return np.asarray(theta, np.float64), [np.asarray(s, np.float64) for s in spread]


def _params():
    from ..validate.steps import PARAMETERS
    return PARAMETERS


def _factor(param: str, theta) -> float:
    return float(math.exp(theta[_params().index(param)]))


def _value(param: str, base: float, theta) -> float:
    v = base * _factor(param, theta)
    return min(v, 1.0) if param in CAPPED else v


# ------------------------------------------------------------------------------------- writing

def _scan(lines: list[str]):
    """(table of each line, {table: (header line or None, last key line or None)}); arrays of tables
    numbered as the uncertainty's inputs name them ("network.levels[1]")."""
    tables, counts, cur = [], {}, ""
    spans = {"": (None, None)}
    for i, line in enumerate(lines):
        st = line.strip()
        if st.startswith("[["):
            name = st.strip("[] ")
            counts[name] = counts.get(name, -1) + 1
            cur = f"{name}[{counts[name]}]"
            spans[cur] = (i, None)
        elif st.startswith("["):
            cur = st.strip("[] ")
            spans[cur] = (i, None)
        elif "=" in st and not st.startswith("#"):
            spans[cur] = (spans[cur][0], i)
        tables.append(cur)
    return tables, spans


def _key_of(line: str) -> str | None:
    st = line.strip()
    if "=" not in st or st.startswith("#") or st.startswith("["):
        return None
    return st.split("=", 1)[0].strip().strip('"')


def _line(key: str, value: str, comment: str) -> str:
    return f"{key} = {value}".ljust(33) + f" # {comment}"


def set_field(text: str, table: str, key: str, value: str, comment: str | None,
              rng: str | None = None, rng_comment: str = "") -> str:
    """`text` with `key` of `table` set to `value` (its comment replaced, or kept where None) and its
    `<key>_range` set to `rng` (or removed where None); a key the table lacks is added at its end, a
    table the file lacks at the file's end."""
    lines = text.splitlines()
    tables, _ = _scan(lines)
    lines = [ln for ln, t in zip(lines, tables) if not (t == table and _key_of(ln) == key + RANGE_SUFFIX)]
    tables, spans = _scan(lines)
    at = next((i for i, (ln, t) in enumerate(zip(lines, tables)) if t == table and _key_of(ln) == key), None)
    if at is not None:
        if comment is None:
            old = lines[at]
            comment = old[old.index("#") + 1:].strip() if "#" in old.split("=", 1)[1] else ""
        lines[at] = _line(key, value, comment) if comment else f"{key} = {value}"
    else:
        if table not in spans:
            lines += ["", f"[{table}]"]
            tables, spans = _scan(lines)
        head, last = spans[table]
        at = last if last is not None else (head if head is not None else -1)
        at += 1
        lines.insert(at, _line(key, value, comment or "source: calibrate"))
    if rng is not None:
        lines.insert(at + 1, _line(key + RANGE_SUFFIX, rng, rng_comment))
    return "\n".join(lines) + "\n"


def _fmt(v) -> str:
    """A TOML value: a string, a list of numbers, or a number to 6 significant digits."""
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return str(v) if isinstance(v, int) else f"{float(v):.6g}"


def _rows_text(lines: list[int]) -> str:
    lines = sorted(lines)
    parts, start = [], lines[0]
    for a, b in zip(lines, lines[1:] + [None]):
        if b != a + 1:
            parts.append(str(start) if start == a else f"{start}-{a}")
            start = b
    return ("row " if len(lines) == 1 else "rows ") + ", ".join(parts)


def _range_for(param, base_value, theta, spread, base_input, spec, relative: bool = False) -> tuple[str, str]:
    """(the TOML range, its source comment) of one fitted number."""
    value = _value(param, base_value, theta)
    if spread:
        vals = [_value(param, base_value, s) for s in spread] + [value]
        lo, hi = min(vals), max(vals)
        why = f"source: the spread of the {len(spread)} leave-one-row-out fits of the same rows ({param} scale)"
    elif base_input is not None:
        f = value / base_value if base_value else 1.0
        lo, hi = base_input.lo * f, base_input.hi * f
        why = (f"source: the base preset's range [{base_input.lo:.4g}, {base_input.hi:.4g}] ({base_input.provenance}) "
               f"moved by the fitted {param} scale: one row fits one combination of the scales, not each")
    else:
        return '"0%"', "source: exact in the base preset (a default), so exact here too"
    lo, hi = max(min(lo, value), spec.lo), min(max(hi, value), spec.hi)
    if value > 0:
        up, down = hi / value - 1, 1 - lo / value
        # a relative range holds whatever value the line ends up with: a system's own [nic] replaces a
        # chip's NIC numbers but not their ranges, so the chip's NIC ranges are relative (covering the
        # fit's range); any range that is symmetric reads the same either way
        if relative or abs(up - down) < 1e-6:
            pct = 100 * max(up, down)
            if pct <= MAX_RELATIVE_RANGE:
                return f'"{pct:.4g}%"', why
    return f"[{lo:.6g}, {hi:.6g}]", why


def _unit_value(obj, leaf: str, scale: float) -> float:
    x = obj
    for part in leaf.split("."):
        m = re.match(r"(\w+)\[(\d+)\]", part)
        x = getattr(x, m[1])[int(m[2])] if m else getattr(x, part)
    return float(np.asarray(x)) / scale


def chip_text(base_path: Path, base_system, theta, spread, inputs, source: str, header: list[str],
              nic_in_system: set[str]) -> str:
    """The calibrated chip's TOML: the base chip file with the fitted fields replaced."""
    from ..validate.steps import scaled
    text = Path(base_path).read_text(encoding="utf-8")
    data = read_file(base_path)
    fitted = scaled(base_system, jnp.asarray(theta, jnp.float32))
    by_field = {i.field: i for i in inputs if Path(i.file) == Path(base_path)}
    name = data.get("name", base_path.stem)
    text = set_field(text, "", "name", _fmt(f"{name}-calibrated"), None)
    text = set_field(text, "", "calibrated", _fmt(source), "the model's error then draws no family bias: "
                     "the fit took it")
    for param, fields in CHIP_FIELDS.items():
        for section, key in fields:
            spec = CHIP[f"{section}.{key}"]
            raw = data.get(section, {}).get(key)
            if raw is None and section == "nic" and key in nic_in_system:
                continue             # a default of the chip's that this system's own [nic] replaces (fitted there)
            base_value = float(raw) if raw is not None else _unit_value(base_system, spec.leaf, spec.scale)
            if (raw is not None and float(raw) == 0) or (raw is None and (section, key) in FOLLOWS):
                continue             # nothing to scale, or a default that follows a fitted field: as the base
            value = _value(param, base_value, theta)
            if raw is None:          # a default: the fitted system's own value, which scaled() moved
                value = _unit_value(fitted, spec.leaf, spec.scale)
            rng, why = _range_for(param, base_value, theta, spread, by_field.get(f"{section}.{key}"), spec,
                                  relative=section == "nic")
            comment = (f"source: fitted by perfmodel calibrate --steps on {source}: the base's {base_value:.6g} x "
                       f"{_factor(param, theta):.4g} ({param} scale)")
            if param in CAPPED and value < base_value * _factor(param, theta) * (1 - 1e-6):
                comment += ", capped at 1"
            text = set_field(text, section, key, _fmt(value), comment, rng, why)
    return "\n".join(header) + "\n" + text


def system_text(base_path: Path, base_system, n: int, chip_path: Path, theta, spread, inputs, source: str,
                header: list[str]) -> str:
    """The calibrated system's TOML: the base system file, its size first, its chip the calibrated
    one, its levels' (and its own [nic]'s) latencies fitted."""
    text = Path(base_path).read_text(encoding="utf-8")
    data = read_file(base_path)
    by_field = {i.field: i for i in inputs if Path(i.file) == Path(base_path)}
    text = set_field(text, "", "name", _fmt(f"{data['name']}-calibrated"), None)
    text = set_field(text, "", "chip", _fmt(chip_path.name), "the calibrated chip, written beside this file")
    sizes = [int(s) for s in data.get("sizes", [])]
    text = set_field(text, "", "sizes", _fmt([n] + [s for s in sizes if s != n]), None)
    fields = [(f"network.levels[{i}]", "latency_us", SYSTEM["network.levels[].latency_us"])
              for i in range(len(data["network"]["levels"]))]
    nic = data.get("nic", {}) if isinstance(data.get("nic"), dict) else {}
    fields += [("nic", k, CHIP[f"nic.{k}"]) for k in NIC_LATENCIES if k in nic]
    for table, key, spec in fields:
        raw = nic[key] if table == "nic" else data["network"]["levels"][int(table[15:-1])][key]
        base_value = float(raw)
        if base_value == 0:          # no latency to scale (a direct link): the line stays the base's
            continue
        value = _value("latency", base_value, theta)
        rng, why = _range_for("latency", base_value, theta, spread, by_field.get(f"{table}.{key}"), spec)
        comment = (f"source: fitted by perfmodel calibrate --steps on {source}: the base's {base_value:.6g} x "
                   f"{_factor('latency', theta):.4g} (latency scale)")
        text = set_field(text, table, key, _fmt(value), comment, rng, why)
    return "\n".join(header) + "\n" + text


# ------------------------------------------------------------------------------------- the whole

def _step_ms(system, model, plan) -> float:
    from ..evaluate import evaluate
    return float(evaluate(system, model, plan).step_s) * 1e3


def _interval(system, model, plan, measured_ms: float, draws: int, seed: int = 0) -> dict:
    """The 80 % interval of the step as `evaluate --uncertainty` gives it (the stored model error),
    and the inputs' alone (--no-model-error), in ms, and whether each holds the measured step."""
    from ..uncertainty.propagate import propagate
    res = propagate([system], [model], [plan], draws, seed)[0]
    out = {}
    for name, x in (("with_model_error", res.samples["step_s"]), ("inputs_only", res.samples["step_s"] / np.exp(res.eps))):
        p10, p50, p90 = (float(np.quantile(x, q)) * 1e3 for q in (0.1, 0.5, 0.9))
        out[name] = {"p10_ms": p10, "p50_ms": p50, "p90_ms": p90, "width": (p90 - p10) / p50,
                     "holds": bool(p10 <= measured_ms <= p90)}
    return out


def _widest(system):
    """The system's family at its outermost level's size: every level's inputs (their base ranges)."""
    from ..hardware import load_system
    path = Path(system.files[0])
    try:
        return load_system(path, chips=int(read_file(path)["network"]["levels"][-1]["domain_chips"]))
    except (ConfigError, KeyError, TypeError, ValueError):
        return system


def calibrate_steps(csv: str | Path, out_dir: str | Path, *, draws: int = 1000, iterations: int | None = None,
                    command: str | None = None, date: str | None = None, log=lambda m: None) -> dict:
    """Fit the shared parameters on the measured steps of `csv`, write the calibrated presets into
    `out_dir` (new files only) and return the report (module docstring)."""
    from ..hardware import load_system
    from ..uncertainty.inputs import inputs_of
    from ..uncertainty.propagate import check_draws
    from ..validate.csvfile import shown
    if draws:
        draws = check_draws(draws, "draws")
    csv, out_dir = Path(csv), Path(out_dir)
    targets = read_targets(csv)
    chip_names, system_names = output_names(targets)
    check_outputs(out_dir, list(chip_names.values()) + list(system_names.values()))
    date = date or _dt.date.today().isoformat()
    command = command or f"perfmodel calibrate --steps {csv} --out {out_dir}"
    theta, spread = fit_scales(targets, iterations, log=log)
    source = f"{csv.name} {_rows_text([t.line for t in targets])}, {date}"
    header = [f"# Calibrated by `{command}` on {date}.",
              "# The step validation's shared parameters (perfmodel/validate/steps.py) fitted through the model on the",
              f"# measured steps of {csv.name} ({len(targets)} row{'s' * (len(targets) != 1)}, each at its run's plan): "
              f"gemm x {_factor('gemm', theta):.4g}, gather x {_factor('gather', theta):.4g},",
              f"# latency x {_factor('latency', theta):.4g}. The lines whose source says \"fitted by perfmodel calibrate\" changed;",
              "# every other line is the base preset's as shipped, and a tag on it such as [ref] is one of the sources",
              "# its own header lists below."]
    # one base system per written file: the first row of each system (its size is the file's first)
    by_system = {}
    for t in targets:
        by_system.setdefault(t.row.system, t)
    texts = {}
    for t in by_system.values():
        chip_base = Path(t.system.files[1])
        name = chip_names[chip_base.stem]
        if name not in texts:
            nic = read_file(t.system.files[0]).get("nic", {})
            texts[name] = chip_text(chip_base, t.system, theta, spread, inputs_of(t.system), source,
                                    header + [f"# Base: {shown(chip_base)}.", ""], set(nic) if isinstance(nic, dict) else set())
    for sname, t in by_system.items():
        chip_path = out_dir / chip_names[Path(t.system.files[1]).stem]
        texts[system_names[sname]] = system_text(Path(t.system.files[0]), t.system, t.system.num_chips, chip_path,
                                                 theta, spread, inputs_of(_widest(t.system)), source,
                                                 header + [f"# Base: {shown(Path(t.system.files[0]))}.", ""])
    out_dir.mkdir(exist_ok=True)
    written = []
    try:
        for name in list(chip_names.values()) + list(system_names.values()):
            write_new(out_dir / name, texts[name])
            written.append(out_dir / name)
    except BaseException:
        for p in written:            # this call's own new files: no half-written calibration is left
            p.unlink(missing_ok=True)
        raise
    calibrated = {s: load_system(out_dir / f) for s, f in system_names.items()}
    rows = []
    for t in targets:
        r = t.row
        cal = calibrated[r.system]
        if cal.num_chips != t.system.num_chips:
            cal = load_system(out_dir / system_names[r.system], chips=t.system.num_chips)
        before, after = _step_ms(t.system, t.model, t.plan), _step_ms(cal, t.model, t.plan)
        row = {"line": t.line, "system": r.system, "global_batch": r.global_batch, "run": r.run,
               "measured_ms": r.ms_per_step, "before_ms": before, "before_err": before / r.ms_per_step - 1,
               "after_ms": after, "after_err": after / r.ms_per_step - 1}
        if draws:
            log(f"drawing the 80 % interval of row {t.line}, before and after ({draws} draws each)")
            row["interval_before"] = _interval(t.system, t.model, t.plan, r.ms_per_step, draws)
            row["interval_after"] = _interval(cal, t.model, t.plan, r.ms_per_step, draws)
        rows.append(row)
    names = _params()
    return {"file": str(csv), "out": str(out_dir), "date": date, "command": command, "draws": draws,
            "scales": {p: _factor(p, theta) for p in names}, "theta": dict(zip(names, map(float, theta))),
            "folds": [dict(zip(names, map(float, s))) for s in spread],
            "written": [str(p) for p in written], "rows": rows,
            "capped": {p: any(_value(p, float(np.asarray(getattr(t.system.chip, LEAF[p]))), theta)
                              >= 1.0 for t in targets) for p in sorted(CAPPED)}}


def format_report(rep: dict) -> str:
    s = rep["scales"]
    n = len(rep["rows"])
    lines = [f"calibrated on {rep['file']} ({n} row{'s' * (n != 1)}, {rep['date']}): gemm x {s['gemm']:.4f}, "
             f"gather x {s['gather']:.4f}, latency x {s['latency']:.4f}"
             + (f" (ranges: {len(rep['folds'])} leave-one-row-out fits)" if rep["folds"] else
                " (one row: the ranges are the base's, moved)"),
             "wrote " + ", ".join(rep["written"]),
             f"  {'row':>4} {'system':<14} {'batch':>7} {'measured':>9} {'before':>9} {'err':>7} {'after':>9} {'err':>7}"]
    for r in rep["rows"]:
        lines.append(f"  {r['line']:>4} {r['system']:<14} {r['global_batch']:>7} {r['measured_ms']:>7.3f}ms "
                     f"{r['before_ms']:>7.3f}ms {100 * r['before_err']:>+6.1f}% {r['after_ms']:>7.3f}ms "
                     f"{100 * r['after_err']:>+6.1f}%")
    off = [r for r in rep["rows"] if abs(r["after_err"]) > FAR]
    if off:
        capped = [p for p in sorted(CAPPED) if rep.get("capped", {}).get(p)]
        lines.append(f"  note: {len(off)} row{'s' * (len(off) != 1)} still beyond {100 * FAR:.0f} % after the fit"
                     + (f" ({' and '.join(capped)} efficiency capped at 1)" if capped else "")
                     + f": the three shared scales do not fit {'them' if len(off) != 1 else 'it'} (runs that disagree with each other, or a link, a "
                     "kernel or a setting the scales do not reach); where one row pulls them far, check the written "
                     "presets before using them for other runs")
    if rep["draws"]:
        lines.append(f"  80 % interval of the step, p10 - p90 over {rep['draws']:,} draws at the row's plan (width: "
                     "(p90 - p10) / p50; holds: the measured step lies inside):")
        iv = lambda d: f"{d['p10_ms']:.3f} - {d['p90_ms']:.3f} ms ({100 * d['width']:.0f} %, {'holds' if d['holds'] else 'misses'})"
        for r in rep["rows"]:
            if "interval_before" not in r:
                continue
            for key, what in (("with_model_error", "as evaluate --uncertainty"), ("inputs_only", "inputs alone")):
                lines.append(f"  {r['line']:>4} {what:<26} before {iv(r['interval_before'][key])}, "
                             f"after {iv(r['interval_after'][key])}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- one row, the others held out

def held_out_check(csv: str | Path, lines, out_dir: str | Path, *, draws: int = 0, log=lambda m: None) -> dict:
    """Calibrate on the rows of `csv` on `lines` (a line number or several) alone (a copy of the CSV
    with those rows only, written beside `out_dir`; the presets into `out_dir`), then price every row
    at its run's plan: with the presets as shipped (blind), with the validation's stored
    leave-one-system-out (results.json, for a row it holds), and with the calibrated presets where they apply to it: the calibrated system file at the row's size
    for a row of the same system family, the row's own system with the calibrated chip for a row that
    shares only the chip; a row that shares neither is not touched by the calibration."""
    import csv as _csv
    from ..hardware import load_system
    from ..validate.steps import STEPS
    csv, out_dir = Path(csv), Path(out_dir)
    targets = read_targets(csv)
    lines = sorted({lines} if isinstance(lines, int) else set(lines))
    bad = [n for n in lines if n not in [t.line for t in targets]]
    if bad or not lines:
        raise ConfigError(str(csv), "line", f"has no data row on line {bad[0] if bad else '(none given)'}; its rows are "
                          f"on lines {', '.join(str(t.line) for t in targets)}")
    with open(csv, newline="", encoding="utf-8") as f:
        table = list(_csv.reader(f))
    one = out_dir.parent / f"{csv.stem}-line{'-'.join(map(str, lines))}.csv"
    write_new(one, _csv_text(table[0], *(table[n - 1] for n in lines)))
    rep = calibrate_steps(one, out_dir, draws=draws, log=log)
    stored = {}
    try:
        for r in json.loads((STEPS / "results.json").read_text())["steps"]["datasets"][0]["rows"]:
            stored[(r["system"], r["global_batch"], r["run"])] = r.get("run_plan_loso_ms")
    except (OSError, ValueError, KeyError, IndexError):
        pass
    fitted = [t for t in targets if t.line in lines]
    cal_systems = {Path(t.system.files[0]): out_dir / f"{Path(t.row.system).stem}.toml" for t in fitted}
    cal_chips = {Path(t.system.files[1]): out_dir / f"{Path(t.system.files[1]).stem}.chip.toml" for t in fitted}
    rows = []
    for t in targets:
        r = t.row
        out = {"line": t.line, "system": r.system, "global_batch": r.global_batch, "measured_ms": r.ms_per_step,
               "blind_ms": _step_ms(t.system, t.model, t.plan), "loso_ms": stored.get((r.system, r.global_batch, r.run))}
        sys_file, chip_file = Path(t.system.files[0]), Path(t.system.files[1])
        if sys_file in cal_systems:
            out["shares"] = "fitted" if t.line in lines else "system"
            system = load_system(cal_systems[sys_file], chips=t.system.num_chips)
        elif chip_file in cal_chips:
            out["shares"], system = "chip", load_system(r.system, chip=cal_chips[chip_file])
        else:
            out["shares"], system = "none", None
        if system is not None:
            out["calibrated_ms"] = _step_ms(system, t.model, t.plan)
        rows.append(out)
    from ..validate.csvfile import shown
    return {"file": shown(csv), "lines": lines, "scales": rep["scales"], "written": rep["written"], "one_row_csv": str(one),
            "rows": rows}


def _csv_text(*rows) -> str:
    import csv as _csv
    import io
    buf = io.StringIO()
    w = _csv.writer(buf, lineterminator="\n")
    for r in rows:
        w.writerow(r)
    return buf.getvalue()


def format_held_out(rep: dict) -> str:
    s = rep["scales"]
    lines = [f"calibrated on {_rows_text(rep['lines']).replace('row', 'line')} of {rep['file']} alone: gemm x {s['gemm']:.4f}, gather x {s['gather']:.4f}, "
             f"latency x {s['latency']:.4f}",
             f"  {'line':>4} {'system':<12} {'batch':>7} {'measured':>9} {'blind':>7} {'LOSO':>7} {'calibrated':>10}  shares"]
    pct = lambda r, k: f"{100 * (r[k] / r['measured_ms'] - 1):>+6.1f}%" if r.get(k) is not None else f"{'-':>7}"
    for r in rep["rows"]:
        lines.append(f"  {r['line']:>4} {r['system']:<12} {r['global_batch']:>7} {r['measured_ms']:>7.3f}ms "
                     f"{pct(r, 'blind_ms')} {pct(r, 'loso_ms')} {pct(r, 'calibrated_ms'):>10}  {r['shares']}")
    lines.append("  errors of the step at each run's plan: blind (the presets as shipped), LOSO (the validation's "
                 "leave-one-system-out, stored), calibrated (the presets written: the system file for its family, "
                 "the chip file alone for a row that shares only the chip)")
    return "\n".join(lines)


def held_out_main(argv=None) -> int:
    import argparse
    import sys
    ap = argparse.ArgumentParser(prog="python -m perfmodel.calibrate held-out",
                                 description="calibrate on one row of a steps CSV, price the others (held_out_check)")
    ap.add_argument("--csv", default=None, help="steps CSV (default data/measurements/steps/mlperf_dlrm_dcnv2.csv)")
    ap.add_argument("--line", type=int, required=True, action="append",
                    help="the line of a row to calibrate on (2: the first row); repeatable")
    ap.add_argument("--out", required=True, help="folder for the calibrated presets (the one-row CSV goes beside it)")
    ap.add_argument("--draws", type=int, default=0, help="draws of the interval (default 0: none)")
    a = ap.parse_args(argv)
    from ..validate.steps import STEPS
    try:
        rep = held_out_check(a.csv or STEPS / "mlperf_dlrm_dcnv2.csv", a.line, a.out, draws=a.draws,
                             log=lambda m: print(m, file=sys.stderr, flush=True))
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(format_held_out(rep))
    return 0
