"""The fitted chip written as a preset TOML, its comments kept from the base preset."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..config import RANGE_SUFFIX, preset_path, read_file
from ..schema import CHIP

# ------------------------------------------------------------------------------------ writing

def _fmt(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    if isinstance(v, int):
        return str(v)
    return f"{float(v):.6g}"


def _base_comments(path) -> dict:
    """(section, key) -> the '# source: ...' / '# assumed: ...' comment of each line of a preset."""
    out, sec = {}, ""
    for line in Path(path).read_text().splitlines():
        st = line.strip()
        if st.startswith("[") and not st.startswith("[["):
            sec = st.strip("[]")
        elif "=" in st and not st.startswith("#") and "#" in st:
            key = st.split("=", 1)[0].strip()
            out[(sec, key)] = st[st.index("#") + 1:].strip()
    return out


def chip_toml(name: str, chip, base: str, device: str, date: str, command: str, fitted: dict[str, str],
              stats: dict, same_chip: bool = False) -> str:
    """The text of a chip preset: the base preset's fields, the fitted/measured ones replaced, every
    number with its source: calibrated; or, copied from the base preset, the base's own source when
    the device is that chip (same_chip), "assumed" otherwise."""
    raw = read_file(preset_path("chips", base))
    base_comment = _base_comments(preset_path("chips", base))
    where = f"on {device} {date} by `{command}`"
    lines = [f"# Chip calibrated {where}.",
             f"# Fitted through perfmodel's own cost functions on {stats['n_train']} measurements; held out "
             f"{stats['n_held_out']}:",
             *(f"#   {k:<20} median {100 * v['median']:.1f} %, p90 {100 * v['p90']:.1f} % (n={v['n']})"
               for k, v in stats["errors"].items() if k.endswith("held_out")),
             f"# Numbers not measured here are copied from the {base} preset (their lines say so; a tag such as",
             f"# [ref] on them is one of the sources listed at the top of data/chips/{base}.toml).",
             "", f"name = {_fmt(name)}",
             f"description = {_fmt(f'Calibrated on {device} {date} (base: {base})')}"]
    if raw.get("architecture"):         # the same chip: the model error of its family applies
        lines.append(f"architecture = {_fmt(raw['architecture'])}  # source: the {base} preset")
    for sec, body in raw.items():
        if not isinstance(body, dict):
            continue
        lines += ["", f"[{sec}]"]
        for key, val in body.items():
            if key.endswith(RANGE_SUFFIX):          # a base number's stated uncertainty
                own = CHIP.get(f"{sec}.{key.removesuffix(RANGE_SUFFIX)}")
                if own is not None and own.leaf and own.leaf.split(".", 1)[1] in fitted:
                    continue                        # a fitted number's range is its fit's: the default of a source
                comment = base_comment.get((sec, key), "")
                lines.append(f"{key} = {_fmt(val):<{max(37 - len(key), 1)}} {'# ' + comment if comment else ''}".rstrip())
                continue
            spec = CHIP.get(f"{sec}.{key}")
            leaf = spec.leaf.split(".", 1)[1] if spec and spec.leaf and spec.leaf.startswith("chip.") else None
            comment = ""
            if leaf in fitted:
                val = float(np.asarray(getattr(chip, leaf))) / spec.scale
                comment = f"# source: {fitted[leaf]} {where}"
                if not spec.lo <= val <= spec.hi:       # a fit past what the model takes: the file must load
                    val = min(max(val, spec.lo), spec.hi)
                    comment += f" (fit clipped to the model's bound: {spec.allowed()})"
            elif isinstance(val, (int, float)) and not isinstance(val, bool):
                orig = base_comment.get((sec, key), "")
                if same_chip and ":" in orig:
                    kind, why = orig.split(":", 1)
                    comment = f"# {kind.strip()}: ({base} preset) {why.strip()}"
                else:
                    comment = f"# assumed: copied from the {base} preset (not measured by this calibration)"
            text = f"{key} = {_fmt(val)}"
            lines.append(f"{text:<40} {comment}".rstrip())
    return "\n".join(lines) + "\n"


