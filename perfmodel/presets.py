"""The bundled presets and the files a user names in their place: a preset name (`h100`,
`dlrm-dcnv2-mlperf`) or a path, one rule for chips, systems and models."""

from __future__ import annotations

from pathlib import Path

from .config import ConfigError, exists, preset_names, preset_path, read_file


def locate(kind: str, name_or_path: str | Path) -> Path:
    """The file of a preset name, or the path itself (one with a .toml / .json suffix, or anything
    that exists); ConfigError naming what was wrong otherwise."""
    what = kind[:-1]
    if not isinstance(name_or_path, (str, Path)):
        raise ConfigError("", what, f"must be a {what} preset name or a file path, got {type(name_or_path).__name__} "
                          f"{name_or_path!r}")
    if str(name_or_path) == "":
        raise ConfigError("", what, f"is empty; give a {what} preset name or a file path")
    p = Path(name_or_path)
    if p.suffix in (".toml", ".json") or exists(p):
        return p                  # read_file says what is wrong with it, if anything
    return preset_path(kind, str(name_or_path))


def system_families() -> list[tuple[str, list[int], str]]:
    """(family, named sizes, description) for each bundled system family."""
    out = []
    for fam in preset_names("systems"):
        data = read_file(preset_path("systems", fam))
        out.append((fam, [int(s) for s in data.get("sizes", [])], data.get("description", "")))
    return out
