"""`perfmodel list`, `cache` and `schema`: the bundled presets, the compile cache, and the reference
of every configuration file's fields."""

from __future__ import annotations

import json
import os

from ..config import ConfigError, read_file
from . import io
from .args import add_json


def register(sub) -> None:
    ls = sub.add_parser("list", help="the bundled systems, chips and models, one line each")
    add_json(ls)
    ls.set_defaults(func=_cmd_list)

    ca = sub.add_parser("cache", help="the compile cache's folder and what it holds; prune or clear it",
                        description="The persistent compile cache (~/.cache/perfmodel/jax, or $PERFMODEL_CACHE_DIR; "
                                    "empty turns it off): XLA's compiled programs, and perfmodel's traced programs, "
                                    "executables and marks, with the share left by other versions of perfmodel or jax. "
                                    "Other files in the folder are neither counted nor removed.")
    act = ca.add_mutually_exclusive_group()
    act.add_argument("--prune", action="store_true",
                     help="remove perfmodel's files of other versions (and the XLA programs compiled for them)")
    act.add_argument("--clear", action="store_true", help="remove every cache file: the next search compiles again")
    add_json(ca)
    ca.set_defaults(func=_cmd_cache)
    sc = sub.add_parser("schema", help="write the configuration reference (every field of every file) as markdown")
    io.add_output(sc, "--markdown", io.REFERENCE, required=True, metavar="PATH", help="the file to write "
                  "(docs/configuration.md); only a file this command wrote is replaced")
    sc.set_defaults(func=_cmd_schema)


def _cmd_list(args) -> int:
    from ..config import preset_names, preset_path
    from ..presets import system_families

    chips = [(n, read_file(preset_path("chips", n)).get("description", "")) for n in preset_names("chips")]
    models = [(n, read_file(preset_path("models", n)).get("description", "")) for n in preset_names("models")]
    systems = system_families()
    if args.json:
        print(json.dumps({
            "systems": [{"family": f, "sizes": s, "names": [f"{f}-{n}" for n in s], "description": d} for f, s, d in systems],
            "chips": [{"name": n, "description": d} for n, d in chips],
            "models": [{"name": n, "description": d} for n, d in models],
        }, indent=2))
        return 0
    print("systems (use <family>-<chips>, e.g. mtia300-64):")
    for f, s, d in systems:
        print(f"  {f + '-{' + ','.join(map(str, s)) + '}':<28} {d}")
    print("chips:")
    for n, d in chips:
        print(f"  {n:<28} {d}")
    print("models:")
    for n, d in models:
        print(f"  {n:<28} {d}")
    return 0


def _cmd_cache(args) -> int:
    from ..cache import CACHE_KINDS, cache_files, cache_folder, remove_cache_files

    folder = cache_folder()
    if not folder:
        print("the compile cache is off (PERFMODEL_CACHE_DIR is empty)")
        return 0

    def listed():
        if os.path.exists(folder) and not os.path.isdir(folder):
            raise ConfigError(folder, "", "is not a folder (the compile cache's: PERFMODEL_CACHE_DIR)")
        try:
            return cache_files(folder) if os.path.isdir(folder) else []
        except OSError as err:
            raise ConfigError(folder, "", f"the compile cache's folder cannot be read: {err.strerror}") from None

    files = listed()
    removed = None
    if args.prune or args.clear:
        try:
            removed = remove_cache_files([f for f in files if args.clear or f["stale"]])
        except OSError as err:
            raise ConfigError(folder, "", f"a cache file cannot be removed: {err.strerror}: {err.filename}") from None
        files = listed()
    rows = {k: {"files": 0, "bytes": 0, "stale_files": 0, "stale_bytes": 0} for k in CACHE_KINDS}
    for f in files:
        r = rows[f["kind"]]
        r["files"], r["bytes"] = r["files"] + 1, r["bytes"] + f["bytes"]
        if f["stale"]:
            r["stale_files"], r["stale_bytes"] = r["stale_files"] + 1, r["stale_bytes"] + f["bytes"]
    if args.json:
        out = {"folder": folder, "kinds": rows, "bytes": sum(r["bytes"] for r in rows.values())}
        if removed is not None:
            out["removed"] = {"files": removed[0], "bytes": removed[1]}
        print(json.dumps(out, indent=2))
        return 0
    mb = lambda b: f"{b / 1e6:8.2f} MB"
    if removed is not None:
        print(f"removed {removed[0]} files, {mb(removed[1]).strip()} ({'all cache files' if args.clear else 'other versions'})")
    print(f"compile cache: {folder}")
    for k, label in CACHE_KINDS.items():
        r = rows[k]
        stale = f"   {r['stale_files']} of other versions, {mb(r['stale_bytes']).strip()}" if r["stale_files"] else ""
        print(f"  {label:<34} {r['files']:6d} {mb(r['bytes'])}{stale}")
    print(f"  {'total':<34} {len(files):6d} {mb(sum(f['bytes'] for f in files))}")
    if any(f["stale"] for f in files):
        print("`perfmodel cache --prune` removes the files of other versions of perfmodel or jax; --clear, all of them")
    return 0


def _cmd_schema(args) -> int:
    """schema --markdown PATH, the path checked by main() first (cli/io.py): a folder, a name the OS
    refuses or a missing folder is one line, as for every output."""
    return io.save_reference(args.markdown)
