"""The bundled presets under data/: every number cites a source, every preset loads, and the published
numbers are what their public sources say (constants copied by hand below, in SI: the MTIA 300 ISCA
2026 paper and Meta's blog, NVIDIA's H100 and Intel's Gaudi 3 specifications, the MLPerf DLRM-DCNv2
reference in github.com/mlcommons/training, recommendation_v2/torchrec_dlrm)."""

import dataclasses
import re
import tomllib
from pathlib import Path

import jax
import numpy as np
import pytest

from perfmodel import link_bandwidths, load_chip, load_model, load_system

DATA = Path(__file__).resolve().parents[1] / "data"
TOMLS = sorted(DATA.rglob("*.toml"))
CHIPS = sorted(p.stem for p in (DATA / "chips").glob("*.toml"))
MODELS = sorted(p.stem for p in (DATA / "models").glob("*.toml"))
SYSTEMS = [(p.stem, n) for p in sorted((DATA / "systems").glob("*.toml"))
           for n in tomllib.loads(p.read_text())["sizes"]]
CITED = re.compile(r"^#\s*(source|assumed):\s*\S")


# ------------------------------------------------------------------------ (a) every number cites a source

def _split_comment(line: str) -> tuple[str, str]:
    """(key = value, # comment) of one TOML line; a '#' inside a string is not a comment."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == "\\" and quote == '"':
                continue
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            return line[:i], line[i:].strip()
    return line, ""


def _has_number(value) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return True
    if isinstance(value, list):
        return any(_has_number(v) for v in value)
    return False


def uncited(text: str) -> tuple[list[str], int]:
    """Lines whose value is a number (or a list holding numbers) without a trailing `# source:` or
    `# assumed:`, and the count of numeric lines checked. Comment lines, table headers, strings and
    booleans are skipped; a value spread over several lines is reported (the rule needs one line)."""
    bad, checked = [], 0
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#") or s.startswith("["):
            continue
        assignment, comment = _split_comment(line)
        try:
            (value,) = tomllib.loads(assignment).values()
        except (tomllib.TOMLDecodeError, ValueError):
            bad.append(f"line {n}: not a one-line `key = value`: {line!r}")
            continue
        if _has_number(value):
            checked += 1
            if not CITED.match(comment):
                bad.append(f"line {n}: {line.strip()}")
    return bad, checked


def test_the_citation_checker_can_fail():
    text = '\n'.join([
        "# a comment line: 1 2 3",
        "[compute]",
        "a = 1                  # source: [x] a table",
        "b = 2.5                # assumed: a guess",
        'c = "7 # not a comment"',
        "d = true",
        'e = ["x", "y"]',
        "f = 3",                                       # no comment
        "g = [1, 2]             # a reason, but no source",
        'h = "x"                # free text',
        "i = nan                # source:",            # empty source
        "j = [",
    ])
    bad, checked = uncited(text)
    assert [b.split(":")[0] for b in bad] == ["line 8", "line 9", "line 11", "line 12"]
    assert checked == 5


@pytest.mark.parametrize("path", TOMLS, ids=[str(p.relative_to(DATA)) for p in TOMLS])
def test_every_number_cites_a_source(path):
    bad, checked = uncited(path.read_text())
    assert not bad, f"{path.relative_to(DATA)}: numbers without '# source:' / '# assumed:':\n" + "\n".join(bad)
    assert checked >= 8          # every preset is mostly numbers: a parse that skips them all fails here


SOURCES = DATA.parent / "docs" / "sources.md"


def unresolved(text: str, known: set[str]) -> list[str]:
    """The [tags] a value's comment cites that neither a comment line of the same file (its header,
    where each tag is described with its public origin) nor a `### [tag]` heading of docs/sources.md
    defines, and any citation of a path outside the repository ('../', 'shared/')."""
    lines = text.splitlines()
    defined = known | {t for line in lines if line.lstrip().startswith("#")
                       for t in re.findall(r"\[([a-z][a-z0-9-]*)\]", line)}
    bad = []
    for n, line in enumerate(lines, 1):
        if "../" in line or re.search(r"(^|[\s(`])shared/", line):
            bad.append(f"line {n}: a path outside the repository: {line.strip()}")
        if line.lstrip().startswith("#") or "#" not in line:
            continue
        for tag in re.findall(r"\[([a-z][a-z0-9-]*)\]", _split_comment(line)[1]):
            if tag not in defined:
                bad.append(f"line {n}: [{tag}] is described nowhere: {line.strip()}")
    return bad


def test_the_resolution_checker_can_fail():
    text = "# [a] a datasheet\nx = 1  # source: [a] p. 3\ny = 2  # source: [b] p. 4\n# see ../shared/notes.md\n"
    assert [b.split(":")[0] for b in unresolved(text, {"c"})] == ["line 3", "line 4"]
    assert unresolved(text.replace("[b]", "[c]").replace("../shared/notes.md", "docs/sources.md"), {"c"}) == []


@pytest.mark.parametrize("path", TOMLS, ids=[str(p.relative_to(DATA)) for p in TOMLS])
def test_every_citation_resolves_inside_the_repository(path):
    known = set(re.findall(r"^### \[([a-z0-9-]+)\]", SOURCES.read_text(), re.M))
    bad = unresolved(path.read_text(), known)
    assert not bad, f"{path.relative_to(DATA)}: citations a reader cannot follow:\n" + "\n".join(bad)


def test_all_preset_kinds_are_checked():
    assert {p.parent.name for p in TOMLS} == {"chips", "systems", "models"}
    assert len(CHIPS) >= 6 and len(MODELS) >= 5 and len(SYSTEMS) >= 24


# ------------------------------------------------------------------------------- (b) every preset loads

def _finite(tree) -> bool:
    return all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree_util.tree_leaves(tree))


@pytest.mark.parametrize("name", CHIPS)
def test_chip_loads(name):
    chip = load_chip(name)
    assert chip.name == name
    assert _finite(chip)
    assert float(chip.peak_bf16_flops) > 1e14 and float(chip.hbm_bytes) > 1e10 and float(chip.hbm_Bps) > 1e12


@pytest.mark.parametrize("family,n", SYSTEMS, ids=[f"{f}-{n}" for f, n in SYSTEMS])
def test_system_loads_at_each_listed_size(family, n):
    system = load_system(f"{family}-{n}")
    assert system.num_chips == n and system.name == f"{family}-{n}"
    assert system.chip.name == tomllib.loads((DATA / "systems" / f"{family}.toml").read_text())["chip"]
    assert system.levels[-1].size == n and n % system.domain_size == 0
    assert _finite(system)


@pytest.mark.parametrize("name", MODELS)
def test_model_loads(name):
    model = load_model(name)
    assert model.name == name
    T = model.tables.count
    assert T >= 1 and all(np.asarray(a).shape == (T,) for a in (model.tables.rows, model.tables.dim,
                                                                 model.tables.pooling))
    assert _finite(model)
    assert np.all(np.asarray(model.tables.rows) >= 1) and float(model.dense.params()) > 0


# ------------------------------------------------------------------------- (c) published hardware values

def test_mtia300_published_values():
    system = load_system("mtia300-64")
    chip = system.chip
    assert float(chip.peak_bf16_flops) == pytest.approx(560e12, rel=1e-6)
    assert float(chip.peak_fp8_flops) == pytest.approx(1120e12, rel=1e-6)
    assert float(chip.hbm_bytes) == pytest.approx(216e9, rel=1e-6)
    assert float(chip.hbm_Bps) == pytest.approx(6.1e12, rel=1e-6)
    assert float(chip.llc_bytes) == pytest.approx(192e6, rel=1e-6)
    assert float(chip.compute_units) == 72                          # 12 x 6 PEs
    assert float(system.offload.engines) == 16
    assert float(system.offload.reduce_bytes_per_cycle) == 128
    assert float(system.offload.reduce_bytes_per_cycle_all_busy) == 96
    assert float(system.nic.pcie) == 0.0 and system.nic.serves_scale_up     # built-in NICs, both networks
    up, out = (float(x) for x in link_bandwidths(system))
    assert up == pytest.approx(800e9, rel=1e-6)
    assert out == pytest.approx(200e9, rel=1e-6)
    assert float(system.host_power_W) == 1500 and system.chips_per_host == 1


def test_h100_published_values():
    system = load_system("h100-64")
    chip = system.chip
    assert float(chip.peak_bf16_flops) == pytest.approx(989e12, rel=1e-6)
    assert float(chip.peak_fp8_flops) == pytest.approx(1979e12, rel=1e-6)
    assert float(chip.hbm_bytes) == pytest.approx(80e9, rel=1e-6)
    assert float(chip.hbm_Bps) == pytest.approx(3.35e12, rel=1e-6)
    assert float(chip.compute_units) == 132
    assert float(system.offload.engines) == 0                        # NCCL runs on the SMs
    assert float(system.nic.pcie) == 1.0 and not system.nic.serves_scale_up
    up, out = (float(x) for x in link_bandwidths(system))
    assert up == pytest.approx(450e9, rel=1e-6)                      # NVLink4 per direction
    assert out == pytest.approx(50e9, rel=1e-6)                      # one 400 Gb/s NIC = 50 GB/s < PCIe 63 GB/s


def test_h100_scale_out_is_capped_by_pcie():
    """Twice the NIC ports behind the same Gen5 x16 link: scale-out stops at the PCIe 63 GB/s."""
    system = load_system("h100-8")
    wider = system.replace(nic=dataclasses.replace(system.nic, active_ports=2.0 * system.nic.active_ports))
    _, out = (float(x) for x in link_bandwidths(wider))
    assert out == pytest.approx(63e9, rel=1e-6)


def test_gaudi3_published_values():
    system = load_system("gaudi3-64")
    assert float(system.chip.peak_bf16_flops) == pytest.approx(1835e12, rel=1e-6)
    assert float(system.chip.hbm_bytes) == pytest.approx(128e9, rel=1e-6)
    up, out = (float(x) for x in link_bandwidths(system))
    assert up == pytest.approx(525e9, rel=1e-6)                      # 21 of 24 x 200 GbE
    assert out == pytest.approx(75e9, rel=1e-6)                      # 3 x 200 GbE


# ----------------------------------------------------------------------------------- (d) the MLPerf model

MLPERF_ROWS = 204_184_588
# Dense parameters (weights + biases), from the MLPerf reference's layer sizes:
#   bottom MLP 13-512-256-128:   13*512+512 + 512*256+256 + 256*128+128             =    171,392
#   DCNv2, 3 layers of W = 3456, rank 512, each U (W x r), V (r x W) and a bias of W:
#                                3 x (2 x 3456 x 512 + 3456)                        = 10,627,200
#   top MLP 3456-1024-1024-512-256-1:
#     3456*1024+1024 + 1024*1024+1024 + 1024*512+512 + 512*256+256 + 256*1+1       =  5,245,953
#   total                                                                           = 16,044,545
MLPERF_DENSE_PARAMS = 171_392 + 10_627_200 + 5_245_953


def test_mlperf_dense_parameter_arithmetic():
    assert 13 * 512 + 512 + 512 * 256 + 256 + 256 * 128 + 128 == 171_392
    assert 3 * (2 * 3456 * 512 + 3456) == 10_627_200
    assert 3456 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 512 + 512 + 512 * 256 + 256 + 256 + 1 == 5_245_953
    assert MLPERF_DENSE_PARAMS == 16_044_545


def test_mlperf_model_is_the_published_one():
    raw = tomllib.loads((DATA / "models" / "dlrm-dcnv2-mlperf.toml").read_text())
    rows = np.asarray(raw["embeddings"]["rows"], np.int64)
    assert rows.shape == (26,) and int(rows.sum()) == MLPERF_ROWS

    model = load_model("dlrm-dcnv2-mlperf")
    tb = model.tables
    assert tb.count == 26
    loaded = np.asarray(tb.rows)
    assert loaded.dtype == np.float32
    assert float(np.sum(loaded.astype(np.float64))) == pytest.approx(MLPERF_ROWS, rel=1e-6)
    assert float(np.sum(loaded)) == pytest.approx(MLPERF_ROWS, rel=1e-6)
    assert float(np.sum(np.asarray(tb.pooling, np.float64))) == 214
    assert np.all(np.asarray(tb.dim) == 128)
    assert float(model.global_batch) == 65_536
    assert float(model.dense.params()) == MLPERF_DENSE_PARAMS


def test_mlperf_embedding_bytes():
    """fp32 rows of 128 plus row-wise Adagrad's one fp32 per row: 516 B per row."""
    tb = load_model("dlrm-dcnv2-mlperf").tables
    assert np.all(np.asarray(tb.bytes_per_row()) == 128 * 4 + 4)
    total = float(np.sum(np.asarray(tb.rows, np.float64) * np.asarray(tb.bytes_per_row(), np.float64)))
    assert total == pytest.approx(MLPERF_ROWS * 516, rel=1e-6)      # 105,359,247,408 B
    assert MLPERF_ROWS * 516 == 105_359_247_408
    weights = float(np.sum(np.asarray(tb.rows, np.float64) * np.asarray(tb.dim) * np.asarray(tb.bytes_per_element)))
    assert weights == pytest.approx(104.5e9, rel=1e-3)               # 204,184,588 rows x 128 x 4 B: ~104.5 GB of fp32 weights


# ------------------------------------------------------------------------------- (e) system structure

@pytest.mark.parametrize("name,sizes,links", [
    ("mtia300-64", (16, 64), ("scale_up", "scale_out")),
    ("h100-64", (8, 64), ("scale_up", "scale_out")),
    ("h100-8", (8,), ("scale_up",)),
    ("mtia300-16", (16,), ("scale_up",)),
])
def test_system_levels(name, sizes, links):
    system = load_system(name)
    assert tuple(level.size for level in system.levels) == sizes
    assert tuple(level.link for level in system.levels) == links
    assert system.domain_size == sizes[0] and system.num_chips == sizes[-1]
