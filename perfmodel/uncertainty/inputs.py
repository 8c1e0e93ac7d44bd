"""The uncertain inputs of a system and a model: every continuous number of their files, with the
range it may take.

A number's range is the one its file states beside it, `<key>_range = "N%"` or `[lo, hi]`
(config.parse_range; docs/configuration.md), else a default by its provenance, read from the tag
every preset line carries (tests/test_presets.py):

  source:   a datasheet figure, a library's constant or a published measurement: +- 5 %. A datasheet
            or a single measurement describes one part and one run; parts differ in clocks and power
            limits and runs in their measured spread by a few percent. A capacity a datasheet gives
            (HBM, last-level cache, host DRAM) is exact: the share a plan may use is the uncertain one.
  assumed:  a number without a measurement behind it (a rule of thumb, another chip's value): +- 30 %.
            Assumptions that matter state their own range in the presets, with why.
  (none)    a chip or system number without a tag is taken as assumed (+- 30 %).

A model file's numbers define the workload being studied (its tables, batch, layers), so they are
exact unless the file states a range; counts and the files' structure (integers: chips, ports,
rows, dims) are always exact. Fields absent from a file take their defaults, held exact.

Each input is uniform over its range. A default range that a field's bound would cut (an assumed
0.9 of HBM's peak, +- 30 %, passes 1.0) narrows to stay centred on the value, the file's best guess
(0.8 to 1.0); a value on its field's bound (an assumed non-blocking oversubscription of 1) can only be
wrong one way, and its range is one-sided (1 to 1.3). A stated range is taken as stated.
Inputs are named `<file>:<field>` ("h100:memory.hbm_efficiency", "mtia300:network.levels[0].latency_us"):
two systems built from one chip file share its inputs, so a comparison draws them once.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import jax
import numpy as np

from ..config import RANGE_SUFFIX, Range, exists, parse_range, read_file
from ..hardware import System
from ..schema import CHIP, MODEL, SYSTEM
from ..workload import RankingModel

DEFAULT_SPREAD = {"source": 0.05, "assumed": 0.30, "untagged": 0.30}    # relative half-widths, above
# a capacity a datasheet gives is the part's size, exact; what a plan may use of it is the uncertain
# share (hbm_usable_fraction)
SOURCED_EXACT = frozenset({"memory.hbm_capacity_GB", "memory.llc_capacity_MB", "host.dram_GB"})
_TAG = re.compile(r"#\s*(source|assumed)\s*:")


@dataclass(frozen=True)
class Input:
    """One uncertain number: where it is, its value and the range it is drawn from."""

    name: str              # "<file stem>:<field>", the key comparisons share draws by
    file: str              # the file that sets it
    field: str             # the dotted field name ("memory.hbm_efficiency", "network.levels[0].latency_us")
    label: str             # what it is, for tables
    unit: str              # the field's unit
    value: float           # the file's value, in the unit (a list field: 1, and lo/hi are factors)
    lo: float
    hi: float
    provenance: str        # "stated" (the file's own range), "source", "assumed" or "untagged"
    leaf: str              # the array it sets, dotted from the System ("chip.hbm_Bps") or the model
                           # ("model.tables.pooling")
    scale: float           # SI per unit (1 for a factor)
    factor: bool = False   # True: the draw multiplies the leaf (a list field: every table moves together)

    @property
    def si_bounds(self) -> tuple[float, float]:
        return (self.lo, self.hi) if self.factor else (self.lo * self.scale, self.hi * self.scale)


def _tags(path: Path) -> dict[tuple[str, str], str]:
    """(table, key) -> "source" / "assumed" from each line's comment; tables of arrays are numbered
    ("network.levels[1]"). A file that cannot be read as text gives no tags."""
    out: dict[tuple[str, str], str] = {}
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return out
    table, counts = "", {}
    for line in lines:
        st = line.strip()
        if st.startswith("[["):
            name = st.strip("[] ")
            counts[name] = counts.get(name, -1) + 1
            table = f"{name}[{counts[name]}]"
        elif st.startswith("["):
            table = st.strip("[] ")
        elif "=" in st and not st.startswith("#"):
            key = st.split("=", 1)[0].strip().strip('"')
            m = _TAG.search(st)
            out[(table, key)] = m.group(1) if m else "untagged"
    return out


@functools.lru_cache(maxsize=64)
def _parsed(path: str, stamp: tuple) -> tuple[dict, dict]:
    """A file's data and line tags, read once per version of the file (stamp: its mtime and size)."""
    return read_file(path), _tags(Path(path))


def _read(path: Path) -> tuple[dict, dict]:
    st = path.stat()
    return _parsed(str(path), (st.st_mtime_ns, st.st_size))


def _readable(file: str) -> Path | None:
    p = Path(file) if file else None
    return p if p is not None and p.suffix in (".toml", ".json") and exists(p) else None


def _entry(field, table: dict, key_table: str, tags: dict, file: Path, field_name: str, leaf: str,
           exact_default: bool) -> Input | None:
    """The Input of one field of `table` (a parsed TOML table), or None where it is exact."""
    if not field.ranged or field.key not in table:
        return None
    raw = table[field.key]
    spec = field.num()
    if isinstance(raw, list):
        values, is_list = [float(v) for v in raw], True
    else:
        values, is_list = [float(raw)], False
    stated = table.get(field.key + RANGE_SUFFIX)
    if stated is not None:
        rng = parse_range(stated, spec, values, str(file), field_name + RANGE_SUFFIX)
        provenance = "stated"
    elif exact_default:
        return None
    else:
        provenance = tags.get((key_table, field.key), "untagged")
        if provenance == "source" and field.name in SOURCED_EXACT:
            return None
        h = DEFAULT_SPREAD[provenance]
        rng = Range(h, h, True)
    if is_list:                       # relative: parse_range takes only "N%" for a list
        lo, hi, value, factor, scale = 1 - rng.lo, 1 + rng.hi, 1.0, True, 1.0
    else:
        value = values[0]
        lo, hi = rng.bounds(value)
        if provenance != "stated" and field.lo < value < field.hi:
            # a default range stays centred on the value where a bound cuts it (an assumed 0.97 of
            # line rate is 0.94 to 1.0, not 0.68 to 1.0): the value is the file's best guess. A
            # value on a bound (an assumed non-blocking 1.0) can only be wrong one way: one-sided
            half = min(value - lo, hi - value, value - field.lo, field.hi - value)
            lo, hi = value - half, value + half
        lo, hi = max(lo, field.lo), min(hi, field.hi)      # an efficiency stays <= 1, a latency >= 0
        factor, scale = False, field.scale
    if hi <= lo:
        return None                                         # a zero, or a range of one point
    label = field.label or field.meaning
    return Input(f"{file.stem}:{field_name}", str(file), field_name, label, field.unit, value, lo, hi,
                 provenance, leaf, scale, factor)


def _chip_inputs(sys_data: dict, sys_tags: dict, sys_file: Path, chip_file: Path) -> list[Input]:
    chip_data, chip_tags = _read(chip_file)
    nic_over = sys_data.get("nic", {}) if isinstance(sys_data.get("nic", {}), dict) else {}
    out = []
    for field in CHIP.values():
        if field.section == "nic" and field.key in nic_over:         # the system's NICs (a cloud's EFA)
            e = _entry(field, nic_over, "nic", sys_tags, sys_file, field.name, field.leaf, False)
        else:
            e = _entry(field, chip_data.get(field.section, {}), field.section, chip_tags, chip_file,
                       field.name, field.leaf, False)
        if e is not None:
            out.append(e)
    return out


def _system_inputs(system: System, data: dict, tags: dict, file: Path) -> list[Input]:
    out = []
    for field in SYSTEM.values():
        if field.section == "":
            e = _entry(field, data, "", tags, file, field.name, field.leaf, False)
            if e is not None:
                out.append(e)
    levels = data.get("network", {}).get("levels", [])
    for i, raw in enumerate(levels[:len(system.levels)]):          # the levels this size reaches
        for field in SYSTEM.values():
            if field.section == "network.levels[]" and field.leaf:
                leaf = field.leaf.replace("levels[]", f"levels[{i}]")
                e = _entry(field, raw, f"network.levels[{i}]", tags, file,
                           f"network.levels[{i}].{field.key}", leaf, False)
                if e is not None:
                    out.append(e)
    return out


def _model_inputs(model: RankingModel) -> list[Input]:
    file = _readable(model.file)
    if file is None:
        return []
    data, _ = _read(file)
    out = []
    for field in MODEL.values():
        if field.leaf and field.section in ("", "embeddings"):
            table = data if field.section == "" else data.get("embeddings", {})
            e = _entry(field, table, field.section, {}, file, field.name, f"model.{field.leaf}", True)
            if e is not None:
                out.append(e)
    return out


def inputs_of(system: System, model: RankingModel | None = None) -> list[Input]:
    """The uncertain inputs of `system` (its system and chip files) and `model` (its file's stated
    ranges), in file order. A system built in code (no files) has none; ConfigError for a bad range."""
    out: list[Input] = []
    if len(system.files) == 2:
        sys_file, chip_file = _readable(system.files[0]), _readable(system.files[1])
        if sys_file is not None:
            data, tags = _read(sys_file)
            if chip_file is not None:
                out += _chip_inputs(data, tags, sys_file, chip_file)
            out += _system_inputs(system, data, tags, sys_file)
    if model is not None:
        out += _model_inputs(model)
    paths = _leaf_index(system, model)
    return [i for i in out if i.leaf in paths]       # a field the loaded object does not hold (a level past its size)


def _leaf_index(system: System, model: RankingModel | None) -> dict[str, int]:
    """Leaf path ("chip.hbm_Bps", "model.tables.pooling") -> its index in the flattened (system, model)."""
    flat, _ = jax.tree_util.tree_flatten_with_path((system, model))
    out = {}
    for i, (path, _) in enumerate(flat):
        key = jax.tree_util.keystr(path[1:]).lstrip(".")
        out[key if path[0].idx == 0 else f"model.{key}"] = i
    return out


def leaf_spec(inputs: list[Input], system: System, model: RankingModel | None) -> tuple[tuple[int, bool], ...]:
    """(leaf index in the flattened (system, model), multiply?) of each input: what the vectorized
    evaluation does with its column of as_applied's values. An input whose file value is not 0
    multiplies its leaf by drawn / file value, so a variant of the system (a knob moved it: an
    attribution's combination) keeps its own value, moved by the same factor; one at 0 sets it."""
    idx = _leaf_index(system, model)
    return tuple((idx[i.leaf], i.factor or i.value != 0) for i in inputs)


def file_values(inputs: list[Input]) -> np.ndarray:
    """[1, d]: each input's file value in SI, as a draw gives it (a list field's factor: 1)."""
    return np.asarray([[1.0 if i.factor else i.value * i.scale for i in inputs]], np.float64)


def as_applied(inputs: list[Input], values: np.ndarray) -> np.ndarray:
    """Drawn values [N, d] (SI; a factor for a list field) as leaf_spec applies them: a factor of
    the file value where it is not 0, the value itself where it is."""
    nom = file_values(inputs)[0]
    return np.where(nom != 0, values / np.where(nom != 0, nom, 1.0), values)
