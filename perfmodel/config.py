"""Reading config files: TOML/JSON into checked Python values, with one clear error per problem.

Every problem a user can make in a file (missing, negative, non-finite, mistyped or unknown field,
unknown preset) raises :class:`ConfigError` naming the file, the field and what is allowed. The
numeric core never sees unchecked input.
"""

from __future__ import annotations

import json
import math
import os
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
FLOAT32_MAX = 3.4028234663852886e38


class ConfigError(ValueError):
    """A bad value in a config file or request: says where (file, field) and what is allowed."""

    def __init__(self, source: str, field: str, message: str):
        self.source, self.field, self.message = str(source), field, message
        where = f"{source}: " if source else ""
        what = f"field '{field}': " if field else ""
        super().__init__(f"{where}{what}{message}")


MAX_FILE_BYTES = 64 * 2**20     # far above any real config or table CSV; /dev/zero or a huge file stops here
MAX_DEPTH = 64                  # tables and lists inside each other; the deepest real file nests 5


def read_bytes(path: str | Path, what: str = "file") -> bytes:
    """The bytes of a regular file of at most MAX_FILE_BYTES; ConfigError naming the file otherwise:
    missing, a name the OS refuses (too long, a bad byte), no permission, a folder, a FIFO (reading
    one waits forever), a device or a link to one (/dev/zero never ends), /proc/self/mem."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise ConfigError(str(path), "", "no such file") from None
    except (OSError, ValueError) as err:          # a name too long, a bad byte, no permission
        raise ConfigError(str(path), "", f"cannot be read: {getattr(err, 'strerror', None) or err}") from None
    if stat.S_ISDIR(mode):
        raise ConfigError(str(path), "", f"is a folder; give the {what}'s path")
    if not stat.S_ISREG(mode):
        raise ConfigError(str(path), "", f"is not a regular file (a FIFO, a device or a socket); give a {what}")
    try:
        with path.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        raise ConfigError(str(path), "", f"cannot be read: {err.strerror or err}") from None
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(str(path), "", f"is larger than {fmt_bytes(MAX_FILE_BYTES)}, the most a {what} may be")
    return data


def read_text(path: str | Path, what: str = "file") -> str:
    """read_bytes as UTF-8 text (a byte-order mark dropped); ConfigError naming the byte that is not."""
    data = read_bytes(path, what)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ConfigError(str(path), "", f"is not UTF-8 text (byte {err.start}: {err.reason}); a {what} is "
                          "UTF-8 text") from None


def csv_error(path: str | Path, err: Exception) -> ConfigError:
    """The ConfigError of a csv.Error while a CSV is read: a cell longer than the csv module's limit,
    a NUL byte."""
    import csv
    limit = csv.field_size_limit()
    if "field limit" in str(err):
        return ConfigError(str(path), "", f"has a cell longer than {limit:,} characters, the most a CSV cell may hold")
    return ConfigError(str(path), "", f"is not a CSV this reads: {err}")


def _depth(data: Any) -> int:
    """How deeply tables and lists nest in `data` (without recursion: a deep one would overflow it)."""
    deepest, todo = 0, [(data, 1)]
    while todo:
        value, d = todo.pop()
        if isinstance(value, (dict, list)):
            deepest = max(deepest, d)
            if d > MAX_DEPTH:
                break
            todo.extend((v, d + 1) for v in (value.values() if isinstance(value, dict) else value))
    return deepest


def read_file(path: str | Path) -> dict[str, Any]:
    """Parse a TOML or JSON file into a dict; a parse error becomes a ConfigError naming the file,
    and so does a file that cannot be read (see read_bytes) or nests deeper than MAX_DEPTH."""
    path = Path(path)
    text = read_text(path, "JSON file" if path.suffix == ".json" else "TOML file")
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as err:
        raise ConfigError(str(path), "", f"cannot be parsed: {err}") from None
    except RecursionError:          # the parser's own recursion, before MAX_DEPTH is checked
        raise ConfigError(str(path), "", f"nests tables or lists too deeply; at most {MAX_DEPTH} levels") from None
    if not isinstance(data, dict):
        raise ConfigError(str(path), "", "must hold a table/object at the top level")
    if _depth(data) > MAX_DEPTH:
        raise ConfigError(str(path), "", f"nests tables or lists too deeply; at most {MAX_DEPTH} levels")
    return data


@dataclass(frozen=True)
class Num:
    """Spec of one numeric field: its key (with unit), SI scale, bounds, default."""

    key: str
    scale: float = 1.0
    lo: float = 0.0            # inclusive lower bound unless lo_open
    hi: float = math.inf
    lo_open: bool = False
    integer: bool = False
    default: float | None = None
    required: bool = True
    unit: str = ""             # the key's unit, said with the bounds ("GB/s")
    ranged: bool = False       # may carry an uncertainty, `<key>_range` (a model input, not structure)

    def allowed(self) -> str:
        lo = f"> {self.lo:g}" if self.lo_open else f">= {self.lo:g}"
        hi = "" if math.isinf(self.hi) else f" and <= {self.hi:g}"
        kind = "an integer" if self.integer else "a finite number"
        unit = f" ({self.unit})" if self.unit else ""
        return f"{kind} {lo}{hi}{unit}"


class Section:
    """A view of one table of a config file that checks each field as it is read.

    `finish()` raises on any key that was never read, so a typo is never silently ignored.
    """

    def __init__(self, data: Any, source: str, prefix: str = ""):
        self.source, self.prefix = source, prefix
        if not isinstance(data, dict):
            raise ConfigError(source, prefix.rstrip("."), "must be a table of fields")
        self.data, self._seen = data, set()

    def name(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def has(self, key: str) -> bool:
        return key in self.data

    def error(self, key: str, message: str) -> ConfigError:
        return ConfigError(self.source, self.name(key), message)

    def _get(self, key: str, required: bool, default: Any, allowed: str = "") -> Any:
        self._seen.add(key)
        if key not in self.data:
            if required:
                raise self.error(key, f"is missing; give {allowed}" if allowed else "is missing")
            return default
        return self.data[key]

    def _scaled(self, value: float, spec: Num, name: str) -> float:
        # leaves are float32: a finite number that overflows it once in SI would be a silent inf
        si = value * spec.scale
        if not abs(si) <= FLOAT32_MAX:
            raise ConfigError(self.source, name, f"must be {spec.allowed()} small enough to hold in SI units "
                              f"as float32 (<= {FLOAT32_MAX / spec.scale:.3g}), got {value!r}")
        return si

    def num(self, spec: Num) -> float | None:
        if spec.key not in self.data and spec.default is not None:
            self._seen.add(spec.key)
            self._range(spec, [spec.default])
            return spec.default * spec.scale          # defaults are trusted, not range-checked
        value = self._get(spec.key, spec.required, None, spec.allowed())
        if value is None:
            return None
        name = self.name(spec.key)
        si = self._scaled(check_number(value, spec, self.source, name), spec, name)
        self._range(spec, [float(value)])
        return si

    def nums(self, spec: Num, length: int | None = None, *, most: int | None = None,
             per: str = "one per table") -> list[float] | None:
        """A list of numbers (or one number broadcast to `length`), of at most `most` entries."""
        value = self._get(spec.key, spec.required and spec.default is None, spec.default,
                          f"a list of numbers, each {spec.allowed()}")
        if value is None:
            return None
        if not isinstance(value, list):
            if length is None:
                raise self.error(spec.key, f"must be a list of numbers, each {spec.allowed()}, got {value!r}")
            value = [value] * length
        if length is not None and len(value) != length:
            raise self.error(spec.key, f"must have {length} entries ({per}), has {len(value)}")
        if most is not None and len(value) > most:
            raise self.error(spec.key, f"has {len(value):,} entries; at most {most:,}")
        name = self.name(spec.key)
        out = [self._scaled(check_number(v, spec, self.source, f"{name}[{i}]"), spec, f"{name}[{i}]")
               for i, v in enumerate(value)]
        self._range(spec, [v / spec.scale for v in out])
        return out

    def _range(self, spec: Num, values: list[float]) -> None:
        """Check the field's uncertainty, `<key>_range`, if the file gives one (parse_range)."""
        key = spec.key + RANGE_SUFFIX
        if key in self.data:
            self._seen.add(key)
            parse_range(self.data[key], spec, values, self.source, self.name(key))

    def text(self, key: str, choices: Iterable[str] | None = None, default: str | None = None) -> str:
        allowed = f"one of: {', '.join(choices)}" if choices is not None else "a string"
        value = self._get(key, default is None, default, allowed)
        if not isinstance(value, str):
            raise self.error(key, f"must be {allowed}, got {value!r}")
        if choices is not None and value not in choices:
            raise self.error(key, f"is {value!r}; allowed: {', '.join(choices)}")
        return value

    def flag(self, key: str, default: bool | None = None) -> bool:
        value = self._get(key, default is None, default, "true or false")
        if not isinstance(value, bool):
            raise self.error(key, f"must be true or false, got {value!r}")
        return value

    def sub(self, key: str, required: bool = True) -> "Section":
        value = self._get(key, required, {})
        return Section(value, self.source, f"{self.name(key)}.")

    def raw(self, key: str, default: Any = None) -> Any:
        return self._get(key, default is None, default)

    def finish(self) -> None:
        unknown = sorted(set(self.data) - self._seen)
        if unknown:
            raise self.error(unknown[0], f"is not a known field here (known: {', '.join(sorted(self._seen))})")


def is_file(path: str | Path) -> bool:
    """Whether `path` names a file; False for a name the OS refuses (too long, a bad byte), where
    Path.is_file raises."""
    try:
        return Path(path).is_file()
    except (OSError, ValueError):
        return False


def exists(path: str | Path) -> bool:
    """Path.exists, False for a name the OS refuses (see is_file)."""
    try:
        return Path(path).exists()
    except (OSError, ValueError):
        return False


def shown(value: Any) -> str:
    """repr(value) for a message, a huge integer cut to its first digits and its length."""
    text = repr(value)
    if isinstance(value, int) and len(text) > 24:
        return f"{text[:12]}... ({len(text.lstrip('-'))} digits)"
    return text if len(text) <= 200 else text[:200] + "..."


def check_number(value: Any, spec: Num, source: str, name: str) -> float:
    bad = ConfigError(source, name, f"must be {spec.allowed()}, got {shown(value)}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad
    try:
        finite = math.isfinite(value)
    except OverflowError:          # an integer too large for a float
        finite = False
    if not finite:
        raise bad
    if spec.integer and int(value) != value:
        raise bad
    low_bad = value <= spec.lo if spec.lo_open else value < spec.lo
    if low_bad or value > spec.hi:
        raise bad
    return float(value)


# ------------------------------------------------------------------------------ uncertainty

RANGE_SUFFIX = "_range"
MAX_RELATIVE_RANGE = 99.0     # percent: a relative range keeps every value positive


@dataclass(frozen=True)
class Range:
    """A field's stated uncertainty: `relative` (a half-width, a fraction of the value: "20%" is 0.2)
    or an absolute [lo, hi] in the key's unit."""

    lo: float
    hi: float
    relative: bool

    def bounds(self, value: float) -> tuple[float, float]:
        """[lo, hi] around `value`, in its unit."""
        return (value * (1 - self.lo), value * (1 + self.hi)) if self.relative else (self.lo, self.hi)


RANGE_ALLOWED = (f"\"N%\" (the value +- N percent, 0 <= N <= {MAX_RELATIVE_RANGE:g}) or [lo, hi] in the "
                 "field's unit, lo <= the value <= hi (a list field takes only \"N%\")")


def parse_range(raw: Any, spec: Num, values: list[float], source: str, name: str) -> Range:
    """A `<key>_range` as a Range; ConfigError naming the file and field otherwise. `values`: the
    field's value(s) in its unit (a list field has one per table)."""
    if not spec.ranged:
        raise ConfigError(source, name, f"{spec.key} is exact (a count or the structure of the file), so it "
                          "takes no range; ranges go on the model's continuous inputs (bandwidths, latencies, "
                          "efficiencies, ...)")
    if isinstance(raw, str):
        text = raw.strip().lstrip("±").removeprefix("+-").strip()
        try:
            pct = float(text.removesuffix("%")) if text.endswith("%") else math.nan
        except ValueError:
            pct = math.nan
        if not 0 <= pct <= MAX_RELATIVE_RANGE:
            raise ConfigError(source, name, f"must be {RANGE_ALLOWED}, got {shown(raw)}")
        return Range(pct / 100, pct / 100, True)
    ok = (isinstance(raw, list) and len(raw) == 2 and len(values) == 1
          and all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in raw))
    if not ok:
        raise ConfigError(source, name, f"must be {RANGE_ALLOWED}, got {shown(raw)}")
    lo, hi = float(raw[0]), float(raw[1])
    if lo > hi:
        raise ConfigError(source, name, f"[{lo:g}, {hi:g}] has lo > hi; give [lo, hi] with lo <= hi")
    if not lo <= values[0] <= hi:
        raise ConfigError(source, name, f"[{lo:g}, {hi:g}] must hold the value {values[0]:g} (lo <= value <= hi)")
    low_bad = lo <= spec.lo if spec.lo_open else lo < spec.lo
    if low_bad or hi > spec.hi:
        raise ConfigError(source, name, f"[{lo:g}, {hi:g}] must lie within what {spec.key} allows: {spec.allowed()}")
    return Range(lo, hi, False)


def fmt_bytes(b: float) -> str:
    """A byte count for a message, with an SI prefix that keeps it readable: '312 B', '4.1 kB', '72 GB'."""
    for unit, f in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(b) >= f:
            return f"{b / f:.3g} {unit}"
    return f"{b:.3g} B"


def preset_path(kind: str, name: str) -> Path:
    """The bundled file for preset `name` of `kind` ('chips', 'systems', 'models')."""
    path = DATA_DIR / kind / f"{name}.toml"
    if not is_file(path):
        known = ", ".join(preset_names(kind)) or "none"
        raise ConfigError("", kind[:-1], f"unknown preset {name!r}; known {kind}: {known}")
    return path


def preset_names(kind: str) -> list[str]:
    return sorted(p.stem for p in (DATA_DIR / kind).glob("*.toml"))


# `--quiet` on any command sets it (for the command's process and the workers it starts): no progress
# line or bar is drawn on stderr; errors and results still print
QUIET = "PERFMODEL_QUIET"


def quiet() -> bool:
    """Whether progress on stderr is turned off ($PERFMODEL_QUIET set and not empty or 0)."""
    return os.environ.get(QUIET, "") not in ("", "0")
