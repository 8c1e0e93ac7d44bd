"""Chip and system files: `data/chips/<chip>.toml` and `data/systems/<family>.toml` (or any path)
into a System; a system named `<family>-<N>` is family `<family>` with N chips, its last domain
partial where N does not fill it."""

from __future__ import annotations

import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from ..config import ConfigError, Section, exists, preset_names, preset_path, read_file
from ..presets import locate
from ..schema import CHIP, CHIP_OPTIONS, MAX_CHIPS, SYSTEM, SYSTEM_OPTIONS, Field, Option, When, reader
from .types import Chip, Level, Nic, Offload, System, rows_of

# a level's rows: its numbers and words (network.levels[])
LEVEL_ROWS = {r.name: r for r in (*SYSTEM.values(), *SYSTEM_OPTIONS.values()) if r.section == "network.levels[]"}


def load_chip(name_or_path: str | Path) -> Chip:
    """Load a chip preset by name (`mtia300`) or from a TOML file path."""
    path = locate("chips", name_or_path)
    chip, _, _ = parse_chip(read_file(path), str(path))
    return chip


def _f(x: float) -> jax.Array:
    return jnp.asarray(x, dtype=jnp.float32)


class Rows:
    """A file's values, read row by row as the schema's rows say: each Field or Option of `rows` is
    read once, on demand, from its table of the file (`tables`: section -> Section; a missing section
    opens as an empty one, so its required fields say they are missing) and checked against its row.
    A default, a requirement (When) or a bound (at_most) that names another row reads that row first.

    value(name): a number in SI, a word or a flag. build(cls, owner): the dataclass from the rows whose
    leaf is owner.<field> (hardware.types)."""

    def __init__(self, top: Section, rows: dict, tables: dict[str, Section] | None = None):
        self.top, self.rows = top, rows
        self.tables = {"": top, **(tables or {})}
        self.values: dict[str, object] = {}

    def table(self, section: str) -> Section:
        if section not in self.tables:
            self.tables[section] = self.top.sub(section, required=False)
        return self.tables[section]

    def value(self, name: str):
        if name not in self.values:
            self.values[name] = self._read(self.rows[name])
        return self.values[name]

    def _in_unit(self, default, row) -> float:
        """A default in the row's unit: a number as written, a row's name as that row's value."""
        return default if isinstance(default, float) else self.value(default) / row.scale

    def _read(self, row):
        s = self.table(row.section)
        if isinstance(row, Option):
            if row.kind == "flag":
                return s.flag(row.key, default=None if row.default is None else row.default == "true")
            return s.text(row.key, row.choices, default=row.default)
        kw = {}
        if isinstance(row.default, When):
            kw = (dict(required=True) if row.default.holds(self.value)
                  else dict(required=False, default=self._in_unit(row.default.otherwise, row)))
        elif isinstance(row.default, str):
            kw = dict(required=False, default=self._in_unit(row.default, row))
        if row.at_most:
            kw["hi"] = self.value(row.at_most) / row.scale
        return s.num(row.num(**kw))

    def read_all(self) -> "Rows":
        for name in self.rows:
            self.value(name)
        return self

    def build(self, cls, owner: str, **structure):
        """cls(**fields): every row whose leaf is owner.<field>, a number as a float32 leaf (an option
        with index: its choice's position), a word or flag as it is; `structure`: the other fields."""
        kw = {}
        for row in rows_of(owner, self.rows):
            v = self.value(row.name)
            if isinstance(row, Option) and row.index:
                v = float(row.choices.index(v))
            kw[row.leaf.rpartition(".")[2]] = _f(v) if isinstance(row, Field) or row.index else v
        return cls(**kw, **structure)

    def finish(self) -> None:
        """Refuse a key no row read, in every table opened and at the top."""
        for s in self.tables.values():
            if s is not self.top:
                s.finish()
        self.top.finish()


def parse_chip(data: dict, src: str) -> tuple[Chip, Nic, Offload]:
    """The Chip, Nic and Offload of a chip file's contents `data` (read from `src`, for messages):
    every row of schema.CHIP and CHIP_OPTIONS, as each says."""
    rows = Rows(Section(data, src), {**CHIP_OPTIONS, **CHIP}).read_all()
    if rows.value("nic.serves_scale_up") and rows.table("scale_up").has("bandwidth_GBps"):
        raise rows.table("scale_up").error("bandwidth_GBps", "must be absent when nic.serves_scale_up = true "
                                           "(the NIC carries scale-up)")
    rows.finish()
    return rows.build(Chip, "chip"), rows.build(Nic, "nic"), rows.build(Offload, "offload")


_SYSTEM_NAME = re.compile(r"^(?P<family>.+)-(?P<n>\d+)$")


def _chip_count(chips) -> int | None:
    """load_system's `chips`: None, or a whole number of chips in 1..MAX_CHIPS."""
    if chips is None:
        return None
    if isinstance(chips, (bool, np.bool_)) or not isinstance(chips, (int, np.integer)) or not 1 <= chips <= MAX_CHIPS:
        raise ConfigError("", "chips", f"must be an integer from 1 to {MAX_CHIPS:,} (or None: the preset's size), "
                          f"got {chips!r}")
    return int(chips)


def load_system(name_or_path: str | Path, *, chips: int | None = None,
                chip: str | Path | None = None) -> System:
    """Load a system: a preset name `<family>-<N>` (e.g. `mtia300-64`), a family name with `chips`
    (`mtia300`, chips=40), or a TOML path. Any size up to the outermost level loads: the last
    domain of a level may be partial (mtia300-40: racks of 16, 16 and 8).

    `chips` overrides the chip count; `chip` replaces the chip (a preset name or a chip TOML, e.g.
    one written by calibration).
    """
    count = _chip_count(chips)
    if not isinstance(name_or_path, (str, Path)) or str(name_or_path) == "":
        locate("systems", name_or_path)          # says what was wrong
    text = str(name_or_path)
    p = Path(text)
    if p.suffix in (".toml", ".json") or exists(p):
        path = locate("systems", p)
    else:
        match = _SYSTEM_NAME.match(text)
        families = preset_names("systems")
        if count is not None and text in families:         # a family name with its size given apart
            match = {"family": text, "n": str(count)}
        if not match or match["family"] not in families:
            known = ", ".join(f"{f}-<N>" for f in families)
            sized = " (or a family name with chips, e.g. --chips 40)" if text in families else ""
            raise ConfigError("", "system", f"unknown system {text!r}; known: {known}{sized} (see `perfmodel list`)")
        path = preset_path("systems", match["family"])
        if count is None:
            n = int(match["n"])
            if not 1 <= n <= MAX_CHIPS:
                raise ConfigError("", "system", f"{text!r} has {n:,} chips; a system has 1 to {MAX_CHIPS:,}")
            count = n
    # a size that does not fit the family is the fault of where the size came from: the `chips`
    # argument when given, the family file's levels otherwise (a name's size, a TOML's first size)
    blame = ("", "chips") if chips is not None else None
    return _parse_system(read_file(path), str(path), count, chip, blame)


def _beside(chip: str, src: str) -> str:
    """A system file's chip as a path relative to that file's folder (so a folder of presets, such as
    calibrate's, can move as a whole); a preset name or an absolute path as given."""
    p = Path(chip)
    if p.is_absolute() or not (p.suffix in (".toml", ".json") or len(p.parts) > 1) or not Path(src).is_file():
        return chip
    return str(Path(src).parent / p)


def _parse_system(data: dict, src: str, count: int | None, chip_override,
                  blame: tuple[str, str] | None = None) -> System:
    top = Section(data, src)
    family = top.text("name")
    top.text("description", default="")
    chip_name = top.text("chip")
    if not chip_name.strip():
        raise top.error("chip", "is empty; give a chip preset name (e.g. 'h100') or a chip TOML path")
    sizes = top.nums(SYSTEM["sizes"].num(), most=1000)
    if not sizes:
        raise top.error("sizes", "must list at least one chip count (the family's named sizes, e.g. [8, 64])")
    per_host = int(reader(top, SYSTEM, "")("chips_per_host"))
    own = Rows(top, {f.name: f for f in rows_of("", SYSTEM, SYSTEM_OPTIONS)}).read_all()     # the host's numbers
    nic_over = top.raw("nic", {})
    if not isinstance(nic_over, dict):
        raise ConfigError(src, "nic", "must be a [nic] table of the chip's nic fields to override")
    net = top.sub("network")
    raw_levels = net.raw("levels")
    net.finish()
    if not isinstance(raw_levels, list) or not raw_levels:
        raise ConfigError(src, "network.levels", "must be a non-empty list of [[network.levels]] tables")
    if len(raw_levels) > 64:
        raise ConfigError(src, "network.levels", f"has {len(raw_levels)} levels; at most 64")
    n = int(count if count is not None else sizes[0])
    parsed = []
    prev = 1
    for i, raw in enumerate(raw_levels):        # every level is checked, even past this system's size
        s = Section(raw, src, f"network.levels[{i}].")
        level = Rows(s, LEVEL_ROWS, {"network.levels[]": s}).read_all()
        s.finish()
        size = int(level.value("network.levels[].domain_chips"))
        if size <= prev and i > 0:
            raise s.error("domain_chips", f"must grow from level to level (previous level has {prev})")
        parsed.append((size, level.value("network.levels[].name"), level))
        prev = size
    levels = []
    for size, lname, level in parsed:
        levels.append((min(size, n), lname, level))
        if size >= n:
            break
    top.finish()
    where = lambda lname: "" if blame is None else f" ({lname!r} in {src})"     # the file is not in the blame
    most = parsed[-1][0]
    if levels[-1][0] < n:
        raise ConfigError(*(blame or (src, "network.levels")), f"the outermost level{where(levels[-1][1])} holds "
                          f"{most:,} chips; the system has {n:,}: use at most {most:,}")
    # the last domain of a level may be partial (absent chips are the last ones), but a domain
    # holds whole domains of the level inside it: the prefix of a full system
    for (inner, *_), (outer, lname, _) in zip(levels, levels[1:-1]):
        if outer % inner:
            raise ConfigError(src, "network.levels", f"{lname!r} holds {outer:,} chips, not whole domains of {inner:,}")
    if n % per_host and n > per_host and per_host < levels[0][0]:
        raise ConfigError(*(blame or (src, "chips")), f"{n} chips do not fill whole hosts of {per_host}"
                          f"{where('chips_per_host')}; use a multiple of {per_host}{_near(n, per_host, most)}")

    chip_path = locate("chips", chip_override if chip_override is not None else _beside(chip_name, src))
    chip_data, chip_src = read_file(chip_path), str(chip_path)
    if nic_over:        # the system's NICs (a node's, not the chip's: e.g. a cloud instance's EFA)
        chip_data = {**chip_data, "nic": {**chip_data.get("nic", {}), **nic_over}}
        chip_src = f"{chip_path} with the [nic] of {src}"
    chip, nic, off = parse_chip(chip_data, chip_src)
    lv = tuple(level.build(Level, "levels[]", size=size) for size, _, level in levels)
    return own.build(System, "", chip=chip, nic=nic, offload=off, levels=lv, num_chips=n,
                     chips_per_host=min(per_host, n), name=f"{family}-{n}", files=(src, str(chip_path)))


def _near(n: int, step: int, most: int) -> str:
    """The sizes next to n that are whole multiples of `step` (at most `most`), as ' (e.g. 32 or 48)'."""
    near = [m for m in (n // step * step, (n // step + 1) * step) if 1 <= m <= most]
    return f" (e.g. {' or '.join(str(m) for m in near)})" if near else ""


CALIBRATED = "+calibrated"    # a family's name on a chip calibrated to measured steps (its `calibrated` field)


def architecture(system: System) -> str:
    """The chip's architecture family (the chip file's `architecture`, e.g. "hopper"), the unit over
    which the model's error is fitted and transferred (uncertainty/modelerror.py); a chip file that
    names none is a family of its own (its file name), so nothing fitted on another family claims it.
    A chip calibrated to a user's measured steps (its `calibrated` field) is its family + CALIBRATED:
    the fit moved its numbers by its family's bias already."""
    if len(system.files) < 2:
        return system.name
    path = Path(system.files[1])
    try:
        data = read_file(path)
    except ConfigError:
        data = {}
    family = str(data.get("architecture", "")).strip().lower() or f"chip:{path.stem}"
    return family + CALIBRATED if str(data.get("calibrated", "")).strip() else family
