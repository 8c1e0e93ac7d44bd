"""Bad input gets one clear ConfigError naming the file, the field and what is allowed.

Each case copies a real preset from data/ into tmp_path with one line changed, loads it, and checks
the error: a ConfigError (a ValueError), raised at loading (never a JAX traceback or a NaN later),
whose one-line message names the file, the dotted field and the allowed values.
"""

import json
import math
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest
import jax

from perfmodel import ConfigError, load_chip, load_model, load_system
from perfmodel.config import Num, Section, check_number

DATA = Path(__file__).resolve().parents[1] / "data"
DELETE = None


def edit(tmp_path: Path, kind: str, preset: str, key: str, new: str | None, name: str | None = None) -> Path:
    """Copy data/<kind>/<preset>.toml to tmp_path with the one line `key = ...` replaced by `new`
    (None deletes it; `new` may hold several lines). A `key` holding "=" matches the line's start."""
    lines = (DATA / kind / f"{preset}.toml").read_text().splitlines()
    pattern = re.escape(key) if "=" in key else rf"{re.escape(key)}\s*="
    hits = [i for i, line in enumerate(lines) if re.match(rf"\s*{pattern}", line)]
    assert len(hits) == 1, f"{key!r} is on {len(hits)} lines of {preset}.toml; the test needs exactly one"
    if new is None:
        del lines[hits[0]]
    else:
        lines[hits[0]] = new
    path = tmp_path / (name or f"bad-{preset}.toml")
    path.write_text("\n".join(lines) + "\n")
    return path


def check(err: ConfigError, file: str, field: str, *pieces: str) -> None:
    """The error names `file` and `field` and says each of `pieces`, on one line."""
    text = str(err)
    assert isinstance(err, ValueError)
    assert "\n" not in text
    assert file in text and Path(err.source).name == file
    assert err.field == field and f"'{field}'" in text
    for piece in pieces:
        assert piece in text, f"{piece!r} not in {text!r}"


def _leaves_finite(tree) -> bool:
    return all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree_util.tree_leaves(tree))


# ------------------------------------------------------------------------------------- controls

def test_unmodified_copies_load(tmp_path):
    """The copies the cases start from load, so each failure below is due to its one edit."""
    chip = load_chip(edit(tmp_path, "chips", "h100", "hbm_capacity_GB", "hbm_capacity_GB = 80", "c.toml"))
    assert float(chip.hbm_bytes) == pytest.approx(80e9, rel=1e-6)
    system = load_system(edit(tmp_path, "systems", "h100", "chips_per_host", "chips_per_host = 8", "s.toml"))
    assert system.num_chips == 8 and system.name == "h100-8"       # the file's first listed size
    model = load_model(edit(tmp_path, "models", "dlrm-small", "global_batch", "global_batch = 4096", "m.toml"))
    assert float(model.global_batch) == 4096 and model.tables.count == 8
    assert _leaves_finite(chip) and _leaves_finite(system) and _leaves_finite(model)


# ------------------------------------------------------------------------------------- chip files

CHIP_CASES = [
    # id, preset, key, new line, field, pieces of the message
    ("missing", "h100", "hbm_capacity_GB", DELETE, "memory.hbm_capacity_GB", ["is missing", "a finite number >= 1e-06 and <= 1e+06 (GB)"]),
    ("negative", "h100", "hbm_capacity_GB", "hbm_capacity_GB = -80", "memory.hbm_capacity_GB",
     ["a finite number >= 1e-06 and <= 1e+06 (GB)", "got -80"]),
    ("zero", "h100", "hbm_bandwidth_GBps", "hbm_bandwidth_GBps = 0", "memory.hbm_bandwidth_GBps",
     ["a finite number >= 0.001 and <= 1e+06 (GB/s)", "got 0"]),
    ("nan", "h100", "hbm_capacity_GB", "hbm_capacity_GB = nan", "memory.hbm_capacity_GB",
     ["a finite number >= 1e-06 and <= 1e+06 (GB)", "got nan"]),
    ("inf", "h100", "peak_bf16_TFLOPs", "peak_bf16_TFLOPs = inf", "compute.peak_bf16_TFLOPs",
     ["a finite number >= 0.001 and <= 1e+06 (TFLOP/s)", "got inf"]),
    ("minus-inf", "h100", "launch_overhead_us", "launch_overhead_us = -inf", "compute.launch_overhead_us",
     ["a finite number >= 0 and <= 1e+06 (us)", "got -inf"]),
    ("string", "h100", "hbm_capacity_GB", 'hbm_capacity_GB = "80"', "memory.hbm_capacity_GB",
     ["a finite number >= 1e-06 and <= 1e+06 (GB)", "got '80'"]),
    ("bool", "h100", "hbm_capacity_GB", "hbm_capacity_GB = true", "memory.hbm_capacity_GB",
     ["a finite number >= 1e-06 and <= 1e+06 (GB)", "got True"]),
    ("list", "h100", "tdp_W", "tdp_W = [700]", "power.tdp_W", ["a finite number >= 0.001 and <= 1e+06 (W)", "got [700]"]),
    # a misspelt key beside the right one: the unknown key is named, with the known ones
    ("unknown-field", "h100", "hbm_capacity_GB", "hbm_capacity_GB = 80\nhbm_capacty_GB = 80",
     "memory.hbm_capacty_GB", ["is not a known field here", "hbm_capacity_GB", "hbm_bandwidth_GBps"]),
    # a misspelt key instead of the right one: the right one is missing, said with what it takes
    ("typo-replaces", "h100", "hbm_capacity_GB", "hbm_capacty_GB = 80", "memory.hbm_capacity_GB",
     ["is missing", "a finite number >= 1e-06 and <= 1e+06 (GB)"]),
    ("above-bound", "h100", "hbm_efficiency", "hbm_efficiency = 1.5", "memory.hbm_efficiency",
     [">= 0.001 and <= 1", "got 1.5"]),
    ("above-other-field", "gaudi3", "active_ports", "active_ports = 25", "nic.active_ports",
     ["an integer >= 1 and <= 24", "got 25"]),
    ("unknown-enum", "h100", "attach", 'attach = "usb"', "nic.attach", ["'usb'", "allowed: integrated, pcie"]),
    ("enum-not-string", "h100", "attach", "attach = 3", "nic.attach", ["one of: integrated, pcie", "got 3"]),
    ("flag-not-bool", "h100", "serves_scale_up", 'serves_scale_up = "no"', "nic.serves_scale_up",
     ["true or false", "got 'no'"]),
    ("non-integer", "h100", "compute_units", "compute_units = 132.5", "compute.compute_units",
     ["an integer >= 1", "got 132.5"]),
    ("fraction-1", "mtia300", "scale_up_fraction", "scale_up_fraction = 1.0", "nic.scale_up_fraction",
     [">= 0.001 and <= 0.999", "got 1.0"]),
    ("core-fraction", "h100", "compute_fraction", "compute_fraction = 0.95", "core_collectives.compute_fraction",
     [">= 0 and <= 0.9", "got 0.95"]),
    ("engines-need-clock", "mtia300", "clock_GHz", DELETE, "offload.clock_GHz", ["is missing", ">= 0.001 and <= 1000 (GHz)"]),
    ("huge-integer", "h100", "hbm_capacity_GB", "hbm_capacity_GB = 1" + "0" * 400, "memory.hbm_capacity_GB",
     ["a finite number >= 1e-06 and <= 1e+06 (GB)", "(401 digits)"]),
    # a value float32 holds but the model cannot use (1e30 GB/s made NaN step times): past the bound
    ("huge", "h100", "hbm_bandwidth_GBps", "hbm_bandwidth_GBps = 1e30", "memory.hbm_bandwidth_GBps",
     ["<= 1e+06 (GB/s)", "got 1e+30"]),
    # a value that float32 makes 0 (1e-300 GB/s: a NaN step time): under the positive minimum
    ("tiny", "h100", "hbm_bandwidth_GBps", "hbm_bandwidth_GBps = 1e-300", "memory.hbm_bandwidth_GBps",
     [">= 0.001", "got 1e-300"]),
    ("port-huge", "h100", "port_bandwidth_Gbps", "port_bandwidth_Gbps = 1e30", "nic.port_bandwidth_Gbps",
     ["<= 8e+06 (Gb/s)", "got 1e+30"]),
]


@pytest.mark.parametrize("preset,key,new,field,pieces", [c[1:] for c in CHIP_CASES], ids=[c[0] for c in CHIP_CASES])
def test_bad_chip_file(tmp_path, preset, key, new, field, pieces):
    path = edit(tmp_path, "chips", preset, key, new)
    with pytest.raises(ConfigError) as info:
        load_chip(path)
    check(info.value, path.name, field, *pieces)


def test_bad_chip_given_to_a_system_names_the_chip_file(tmp_path):
    chip = edit(tmp_path, "chips", "h100", "hbm_bandwidth_GBps", "hbm_bandwidth_GBps = -3350", "my-chip.toml")
    with pytest.raises(ConfigError) as info:
        load_system(DATA / "systems" / "h100.toml", chip=chip)
    check(info.value, "my-chip.toml", "memory.hbm_bandwidth_GBps", ">= 0.001 and <= 1e+06 (GB/s)", "got -3350")
    with pytest.raises(ConfigError) as info:
        load_system("h100-8", chip=chip)                           # preset name + chip file alike
    check(info.value, "my-chip.toml", "memory.hbm_bandwidth_GBps", "got -3350")


# ------------------------------------------------------------------------------------ system files

SYSTEM_CASES = [
    ("missing", "h100", "host_power_W", DELETE, "host_power_W", ["is missing", "a finite number >= 0"]),
    ("zero-per-host", "h100", "chips_per_host", "chips_per_host = 0", "chips_per_host", ["an integer >= 1", "got 0"]),
    ("nan", "h100", "host_usd_per_hour", "host_usd_per_hour = nan", "host_usd_per_hour", ["got nan"]),
    ("non-integer-size", "h100", "sizes", "sizes = [8, 12.5]", "sizes[1]", ["an integer >= 1", "got 12.5"]),
    ("sizes-not-list", "h100", "sizes", 'sizes = "8"', "sizes", ["must be a list of numbers"]),
    ("unknown-field", "mtia300", "host_power_W", "host_power_W = 1500\nhost_power = 1500", "host_power",
     ["is not a known field here", "host_power_W"]),
    ("chip-not-string", "h100", "chip", "chip = 100", "chip", ["a string", "got 100"]),
]


@pytest.mark.parametrize("preset,key,new,field,pieces", [c[1:] for c in SYSTEM_CASES],
                         ids=[c[0] for c in SYSTEM_CASES])
def test_bad_system_file(tmp_path, preset, key, new, field, pieces):
    path = edit(tmp_path, "systems", preset, key, new)
    with pytest.raises(ConfigError) as info:
        load_system(path)
    check(info.value, path.name, field, *pieces)


def _outer_level_link_usb(tmp_path) -> Path:
    text = (DATA / "systems" / "a100.toml").read_text()
    assert text.count('link = "scale_out"') == 1
    path = tmp_path / "usb.toml"
    path.write_text(text.replace('link = "scale_out"', 'link = "usb"'))
    return path


def test_system_level_with_unknown_link(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_system(_outer_level_link_usb(tmp_path), chips=64)
    check(info.value, "usb.toml", "network.levels[1].link", "'usb'", "allowed: scale_up, scale_out")


def test_bad_outer_level_is_reported_at_every_size(tmp_path):
    with pytest.raises(ConfigError):
        load_system(_outer_level_link_usb(tmp_path), chips=8)


def test_a_system_files_relative_chip_path_is_read_beside_the_system_file(tmp_path, monkeypatch):
    """A folder of presets moves as a whole: the chip path is relative to the system file, not the cwd."""
    folder = tmp_path / "presets"
    folder.mkdir()
    edit(folder, "chips", "h100", "hbm_capacity_GB", "hbm_capacity_GB = 40", "mine.toml")
    path = edit(folder, "systems", "h100", "chip", 'chip = "mine.toml"')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert float(load_system(path).chip.hbm_bytes) == pytest.approx(40e9)
    assert float(load_system(path, chip="h100").chip.hbm_bytes) == pytest.approx(80e9)   # --chip as given


def test_system_whose_chip_preset_is_unknown(tmp_path):
    path = edit(tmp_path, "systems", "h100", "chip", 'chip = "h1000"')
    with pytest.raises(ConfigError) as info:
        load_system(path)
    assert info.value.field == "chip"
    # the list names every chip preset (a100 and h800 joined for the measured collective data)
    assert "unknown preset 'h1000'" in str(info.value) and "known chips: a100, b200, b300, gaudi3, gb200, h100," in str(info.value)


@pytest.mark.parametrize("name,sizes,hosts", [
    ("h100-12", (8, 4), 2),                     # one full 8-GPU node and one of 4
    ("mtia300-40", (16, 16, 8), 40),            # two full racks and one of 8; one accelerator per host
    ("mtia300-24", (16, 8), 24),
    ("gaudi3-20", (8, 8, 4), 3),
    ("mtia300-1032", (16,) * 64 + (8,), 1032),
])
def test_a_last_domain_may_be_partial(name, sizes, hosts):
    system = load_system(name)
    assert system.partial and system.domain_sizes == sizes and system.num_hosts == hosts
    assert [lv.size for lv in system.levels][-1] == system.num_chips == sum(sizes)


def test_peers_per_level_of_a_partial_system_by_hand():
    from perfmodel.hardware import domain_chips, padded_sizes, peers_per_level
    s = load_system("mtia300-40")
    peers = peers_per_level(s)
    # a chip of a full rack: 15 rack peers, 24 beyond; of the rack of 8: 7 and 32
    assert peers.shape == (40, 2) and peers[0].tolist() == [15, 24] and peers[39].tolist() == [7, 32]
    assert (peers.sum(1) == 39).all() and domain_chips(s).tolist() == [16] * 32 + [8] * 8
    assert padded_sizes(s) == (16, 48)
    full = load_system("mtia300-48")
    assert not full.partial and peers_per_level(full).tolist() == [15, 32] and domain_chips(full) == 16
    # three levels (4 on a socket, 8 in a server): 12 = a full server and one of 4 (one socket)
    s = load_system("h100pcie-12")
    assert s.domain_sizes == (4, 4, 4) and s.partial and padded_sizes(s) == (4, 8, 16)
    assert peers_per_level(s)[[0, 8]].tolist() == [[3, 4, 4], [3, 0, 8]]


@pytest.mark.parametrize("name,family,per_host", [("gb200nvl72-74", "gb200nvl72", 4), ("gb200nvl72-150", "gb200nvl72", 4)])
def test_hosts_smaller_than_a_domain_must_be_whole(name, family, per_host):
    n = int(name.rsplit("-", 1)[1])
    with pytest.raises(ConfigError) as info:
        load_system(name)
    check(info.value, f"{family}.toml", "chips", f"{n} chips do not fill whole hosts of {per_host}",
          f"use a multiple of {per_host}")


# ---------------------------------------------------------------------------------- unknown presets

@pytest.mark.parametrize("load,name,field,pieces", [
    (load_system, "nosuch-64", "system", ["unknown system 'nosuch-64'", "h100-<N>", "mtia300-<N>", "perfmodel list"]),
    (load_system, "h100", "system", ["unknown system 'h100'", "h100-<N>"]),          # no size
    (load_system, "h100-x8", "system", ["unknown system 'h100-x8'"]),
    (load_model, "nosuch", "model", ["unknown preset 'nosuch'", "known models:", "dlrm-dcnv2-mlperf", "dlrm-small"]),
    (load_chip, "nosuch", "chip", ["unknown preset 'nosuch'", "known chips:", "mtia300", "h100"]),
], ids=["system", "system-no-size", "system-bad-size", "model", "chip"])
def test_unknown_preset(load, name, field, pieces):
    with pytest.raises(ConfigError) as info:
        load(name)
    err = info.value
    assert err.field == field and f"field '{field}'" in str(err) and "\n" not in str(err)
    for piece in pieces:
        assert piece in str(err)


@pytest.mark.parametrize("load", [load_chip, load_model, load_system], ids=["chip", "model", "system"])
def test_missing_file(tmp_path, load):
    with pytest.raises(ConfigError) as info:
        load(tmp_path / "absent.toml")
    assert str(info.value) == f"{tmp_path / 'absent.toml'}: no such file"


@pytest.mark.parametrize("load", [load_chip, load_model, load_system], ids=["chip", "model", "system"])
def test_malformed_toml(tmp_path, load):
    path = tmp_path / "broken.toml"
    path.write_text('name = "x"\n[compute\npeak_bf16_TFLOPs = 1\n')
    with pytest.raises(ConfigError) as info:
        load(path)
    text = str(info.value)
    assert text.startswith(f"{path}: cannot be parsed:") and "line 2" in text and "\n" not in text


def test_top_level_must_be_a_table(tmp_path):
    path = tmp_path / "list.json"
    path.write_text("[1, 2]")
    with pytest.raises(ConfigError, match=r"list\.json: must hold a table/object at the top level"):
        load_model(path)


def test_section_that_is_not_a_table(tmp_path):
    data = tomllib.loads((DATA / "chips" / "h100.toml").read_text())
    data["price"] = 4.0                                    # [price] usd_per_hour = 4.0 flattened by mistake
    path = tmp_path / "flat.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError) as info:
        load_chip(path)
    check(info.value, "flat.json", "price", "must be a table of fields")


# ------------------------------------------------------------------------------------- model files

MODEL_CASES = [
    ("mismatched-lengths", "dlrm-small", "pooling", "pooling = [1, 2, 3]", "embeddings.pooling",
     ["must have 8 entries (one per table)", "has 3"]),
    ("non-integer-rows", "dlrm-small", "rows",
     "rows = [1000, 3000, 10000, 30000, 100000, 300000, 1000000, 1000000.5]", "embeddings.rows[7]",
     ["an integer >= 1", "got 1000000.5"]),
    ("zero-rows", "dlrm-small", "rows", "rows = [1000, 0, 10000, 30000, 100000, 300000, 1000000, 1000000]",
     "embeddings.rows[1]", ["an integer >= 1", "got 0"]),
    ("nan-pooling", "dlrm-small", "pooling", "pooling = [1, 2, nan, 8, 20, 1, 10, 5]", "embeddings.pooling[2]",
     ["a finite number >= 0.001 and <= 100000 (lookups/sample)", "got nan"]),
    ("no-tables", "dlrm-small", "rows", "rows = []", "embeddings.rows", ["at least one table"]),
    ("missing-rows", "dlrm-small", "rows", DELETE, "embeddings.rows", ["is missing", "a list of numbers"]),
    ("duplicate-names", "dlrm-small", "names", 'names = ["c0", "c0", "c2", "c3", "c4", "c5", "c6", "c7"]',
     "embeddings.names", ["a list of 8 distinct names"]),
    ("sequence-not-bools", "hstu-seq", "sequence", "sequence = [1, 1, 0, 0, 0, 0]", "embeddings.sequence",
     ["a list of 6 true/false values"]),
    ("skew-above-1", "hstu-seq", "access_skew", "access_skew = [0.5, 1.0, 0.6, 0.8, 0.7, 1.5]",
     "embeddings.access_skew[5]", [">= 0.001 and <= 1", "got 1.5"]),
    ("batch-nan", "dlrm-small", "global_batch", "global_batch = nan", "global_batch", ["an integer >= 1", "got nan"]),
    ("batch-zero", "dlrm-small", "global_batch", "global_batch = 0", "global_batch", ["an integer >= 1"]),
    ("unknown-optimizer", "dlrm-small", "dense_optimizer", 'dense_optimizer = "lamb"', "dense_optimizer",
     ["'lamb'", "allowed: sgd, adagrad, adam"]),
    ("unknown-emb-optimizer", "dlrm-small", "optimizer", 'optimizer = "adagrad"', "embeddings.optimizer",
     ["allowed: sgd, rowwise_adagrad, adam"]),
    ("unknown-dtype", "dlrm-small", "dense_dtype", 'dense_dtype = "int4"', "dense_dtype",
     ["allowed: fp32, bf16, fp8"]),
    ("unknown-field", "dlrm-small", "global_batch", "global_batch = 4096\nglobal_bacth = 4096", "global_bacth",
     ["is not a known field here", "global_batch"]),
    ("layer-width-not-int", "dlrm-small", "widths = [256, 64]", "widths = [256, 64.5]", "dense.layers[0].widths[1]",
     ["an integer >= 1"]),
    ("layer-heads", "hstu-seq", "heads", "heads = 3", "dense.layers[1].heads", ["must divide d_model = 256"]),
    ("synthetic-bad-argument", "prod-856", "mean_pooling", "mean_pooling = -1", "embeddings.synthetic",
     ["mean_pooling", "must lie in [1, max_pooling=500]", "got -1"]),
    ("synthetic-no-tables", "prod-856", "num_tables", "num_tables = 0", "embeddings.synthetic",
     ["num_tables must be an integer >= 1", "got 0"]),
    ("synthetic-unknown-argument", "prod-856", "seed", "sed = 0", "embeddings.synthetic", ["'sed'"]),
    ("synthetic-and-rows", "prod-856", "index_bytes", "index_bytes = 8\nrows = [10, 20]", "embeddings.rows",
     ["must not be given together with [embeddings.synthetic]"]),
]


@pytest.mark.parametrize("preset,key,new,field,pieces", [c[1:] for c in MODEL_CASES], ids=[c[0] for c in MODEL_CASES])
def test_bad_model_file(tmp_path, preset, key, new, field, pieces):
    path = edit(tmp_path, "models", preset, key, new)
    with pytest.raises(ConfigError) as info:
        load_model(path)
    check(info.value, path.name, field, *pieces)


def test_model_layer_of_unknown_kind(tmp_path):
    text = (DATA / "models" / "dlrm-small.toml").read_text().replace('kind = "dot"', 'kind = "conv"')
    path = tmp_path / "conv.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_model(path)
    check(info.value, "conv.toml", "dense.layers[1].kind", "'conv'", "allowed: mlp, dot, dcnv2, transformer, hstu")


# --------------------------------------------------------------------------------- the checker itself

def test_allowed_text_of_num_specs():
    assert Num("x").allowed() == "a finite number >= 0"
    assert Num("x", lo=0.0, lo_open=True, hi=1.0).allowed() == "a finite number > 0 and <= 1"
    assert Num("x", lo=1.0, integer=True).allowed() == "an integer >= 1"


@pytest.mark.parametrize("value,ok", [(0.5, True), (1, True), (0, False), (1.5, False), (math.nan, False),
                                      (math.inf, False), (True, False), ("0.5", False), (None, False)])
def test_check_number(value, ok):
    spec = Num("f", lo=0.0, lo_open=True, hi=1.0)
    if ok:
        assert check_number(value, spec, "f.toml", "s.f") == float(value)
    else:
        with pytest.raises(ConfigError, match=r"^f\.toml: field 's\.f': must be a finite number > 0 and <= 1, got "):
            check_number(value, spec, "f.toml", "s.f")


def test_section_scales_to_si_and_broadcasts():
    s = Section({"bw_GBps": 2.5, "dims": 64}, "x.toml", "net.")
    assert s.num(Num("bw_GBps", 1e9)) == pytest.approx(2.5e9)
    assert s.nums(Num("dims", 1.0, lo=1.0, integer=True), 3) == [64.0, 64.0, 64.0]
    assert s.num(Num("latency_us", 1e-6, default=1.5)) == pytest.approx(1.5e-6)      # default, scaled
    s.finish()                                                                       # every key read
    s2 = Section({"a": 1, "b": 2}, "x.toml", "net.")
    s2.num(Num("a"))
    with pytest.raises(ConfigError, match=r"field 'net\.b': is not a known field here \(known: a\)"):
        s2.finish()


def test_a_new_row_is_a_field_the_loader_reads():
    """The schema's rows build the hardware: a row is a field of the dataclass its leaf names, and the
    loader reads it as the row says (bounds, a When default, another row's value, an at_most bound)."""
    from dataclasses import dataclass, fields
    from perfmodel.hardware.loading import Rows
    from perfmodel.hardware.types import from_rows
    from perfmodel.pytree import pytree
    from perfmodel.schema import Field, Option, When
    rows = {"box.on": Option("box", "on", "flag", "true or false", None, "", "thing.on"),
            "box.size_GB": Field("box", "size_GB", "GB", 1e9, "thing.size_bytes", 1.0, 100.0, False, When("box.on", 2.0)),
            "box.used_GB": Field("box", "used_GB", "GB", 1e9, "thing.used_bytes", 0.0, 100.0, False, "box.size_GB",
                                 at_most="box.size_GB")}

    @pytree
    @dataclass(frozen=True)
    @from_rows("thing", rows)
    class Thing:
        pass

    assert [f.name for f in fields(Thing)] == ["on", "size_bytes", "used_bytes"]

    def read(box):
        r = Rows(Section({"box": box}, "t.toml"), rows).read_all()
        r.finish()
        return r.build(Thing, "thing")

    t = read({"on": False})                  # When's otherwise, and a default that is another row's value
    assert t.on is False and float(t.size_bytes) == 2e9 and float(t.used_bytes) == 2e9
    t = read({"on": True, "size_GB": 10})
    assert float(t.size_bytes) == 10e9 and float(t.used_bytes) == 10e9
    for box, field, pieces in [({"on": True}, "box.size_GB", ["is missing", ">= 1 and <= 100 (GB)"]),
                               ({"on": True, "size_GB": 10, "used_GB": 12}, "box.used_GB", ["<= 10 (GB)", "got 12"]),
                               ({"on": False, "size_GB": 0.5}, "box.size_GB", [">= 1", "got 0.5"]),
                               ({"on": "yes"}, "box.on", ["true or false", "got 'yes'"]),
                               ({"on": False, "extra": 1}, "box.extra", ["is not a known field here"])]:
        with pytest.raises(ConfigError) as info:
            read(box)
        check(info.value, "t.toml", field, *pieces)
