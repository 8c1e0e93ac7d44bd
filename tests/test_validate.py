"""Validation against published measurements: the datasets are what REFERENCE.md says, every row is
predicted blind and calibrated, bad CSVs get one clear error, the CLI prints the report, and the
calibration-and-validation notebook runs top to bottom."""

import json
import os
from pathlib import Path

import numpy as np
import pytest

from perfmodel import validate as val
from perfmodel.cli import main
from perfmodel.config import ConfigError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def report():
    return val.validate()


def test_datasets_hold_the_published_numbers():
    sets = {d.name: d for d in val.load_datasets()}
    assert set(sets) >= {"a100_8_nccl_all_reduce", "h200_8_nccl_16GiB", "b200p6_1node_nccl_all_reduce",
                         "b200p6_4node_nccl_all_reduce", "deepep_h800_intranode_all_to_all",
                         "deepep_h800_internode_all_to_all"}
    a100 = {r.size_bytes: r.value_GBps for r in sets["a100_8_nccl_all_reduce"].rows}
    assert a100 == {32768: 1.31, 2**20: 18.0, 2**24: 106.2, 2**28: 194.1, 2**30: 229.0, 2**34: 234.89}
    # 32 KiB at 1.31 GB/s bus bandwidth is the 43.8 us REFERENCE.md quotes
    row = sets["a100_8_nccl_all_reduce"].rows[0]
    from perfmodel import load_system
    assert val.measured_seconds(row, load_system("a100-8")) == pytest.approx(43.8e-6, rel=2e-3)
    h200 = {(r.collective, r.algorithm): r.value_GBps for r in sets["h200_8_nccl_16GiB"].rows}
    assert h200 == {("all_reduce", "nvls"): 480.0, ("all_reduce", "ring"): 367.2, ("all_gather", "default"): 361.4,
                    ("reduce_scatter", "default"): 362.9}
    four = [r.value_GBps for r in sorted(sets["b200p6_4node_nccl_all_reduce"].rows, key=lambda r: r.size_bytes)]
    assert four == [5.37, 156.7, 362.0, 381.8]
    ep = {(r.system, r.algorithm): r.value_GBps for r in sets["deepep_h800_internode_all_to_all"].rows}
    assert ep[("h800-32", "dispatch")] == 58 and ep[("h800-64", "combine")] == 50
    assert all(r.source for d in sets.values() for r in d.rows)


def test_every_row_predicted_blind_and_calibrated(report):
    for d in report["datasets"]:
        assert d["n_fit"] >= 1 and d["n_held_out"] >= 1
        for r in d["rows"]:
            assert np.isfinite(r["blind_s"]) and r["blind_s"] > 0 and np.isfinite(r["calibrated_s"])
            assert r["blind_err"] == pytest.approx(r["blind_s"] / r["measured_s"] - 1)
        held = [r for r in d["rows"] if r["split"] == "held_out"]
        assert d["calibrated_geomean_err"] == pytest.approx(val.geomean_error([r["calibrated_s"] for r in held],
                                                                              [r["measured_s"] for r in held]))


def test_bandwidth_bound_points_are_predicted_blind(report):
    """Where a collective is bandwidth-bound the presets' link efficiencies (NCCL's ~370 of 450 GB/s,
    a ConnectX-7's ~48.5 of 50) carry the prediction: within 15 % without any fitting."""
    d = {x["dataset"]: x for x in report["datasets"]}
    for name in ("h200_8_nccl_16GiB", "deepep_h800_intranode_all_to_all", "deepep_h800_internode_all_to_all"):
        assert d[name]["blind_geomean_err"] <= 0.15, name
    for name in ("a100_8_nccl_all_reduce", "b200p6_4node_nccl_all_reduce"):
        big = max(d[name]["rows"], key=lambda r: r["size_bytes"])
        assert abs(big["blind_err"]) <= 0.15, (name, big)
    # one B200 node: NCCL's choice at 16 GiB is NVLS in the model (HGX B200's NVSwitch reduces), at
    # 14/9 of the ring's bus bandwidth; the measured 845.7 GB/s sits between the ring's 740 and that
    big = max(d["b200p6_1node_nccl_all_reduce"]["rows"], key=lambda r: r["size_bytes"])
    assert big["blind_GBps"] == pytest.approx(900 * 0.822 * 14 / 9, rel=0.01) and big["blind_err"] < 0
    # four nodes: the ring's inter-node hops run on every GPU's own NIC (busbw ~ 8 x 50 GB/s x 0.97)
    big = max(d["b200p6_4node_nccl_all_reduce"]["rows"], key=lambda r: r["size_bytes"])
    assert big["blind_GBps"] == pytest.approx(8 * 50 * 0.97, rel=0.03)


def test_calibration_improves_where_it_can(report):
    d = {x["dataset"]: x for x in report["datasets"]}
    for name in ("a100_8_nccl_all_reduce", "b200p6_1node_nccl_all_reduce", "b200p6_4node_nccl_all_reduce"):
        assert d[name]["calibrated_geomean_err"] < d[name]["blind_geomean_err"], name
        assert d[name]["latency_scale"] > 1.5          # measured small messages are slower than NCCL's constants


# What the model reaches (blind, calibrated geometric-mean error), with a small margin: a change that
# makes a dataset worse fails here. The targets (15 % / 7 %) are out of reach where README's
# "Validation" section says why (data/measurements/README.md).
ACHIEVED = {
    "a100_8_nccl_all_reduce": (0.62, 0.25),
    "b200p6_1node_nccl_all_reduce": (0.83, 0.24),
    "b200p6_4node_nccl_all_reduce": (1.00, 0.17),
    "deepep_h800_internode_all_to_all": (0.13, 0.125),
    "deepep_h800_intranode_all_to_all": (0.06, 0.04),
    "h200_8_nccl_16GiB": (0.07, 0.10),
}


def test_errors_stay_where_they_are(report):
    d = {x["dataset"]: x for x in report["datasets"]}
    assert set(ACHIEVED) <= set(d)
    for name, (blind, cal) in ACHIEVED.items():
        assert d[name]["blind_geomean_err"] <= blind, name
        assert d[name]["calibrated_geomean_err"] <= cal, name


def test_rows_are_predicted_with_their_algorithm(report):
    """nvls rows with NVLS (faster than the ring row of the same size), ring rows with the ring,
    default rows with NCCL's choice; the small A100 all-reduce runs LL, not Simple."""
    d = {x["dataset"]: x for x in report["datasets"]}
    h200 = {(r["collective"], r["algorithm"]): r for r in d["h200_8_nccl_16GiB"]["rows"]}
    nvls, ring = h200[("all_reduce", "nvls")], h200[("all_reduce", "ring")]
    assert nvls["modelled_as"].startswith("NVLS") and ring["modelled_as"].startswith("ring")
    assert nvls["blind_GBps"] == pytest.approx(ring["blind_GBps"] * 14 / 9, rel=0.01)
    assert nvls["blind_GBps"] > nvls["measured_GBps"] > ring["blind_GBps"]
    a100 = min(d["a100_8_nccl_all_reduce"]["rows"], key=lambda r: r["size_bytes"])
    assert "NVLS" not in a100["modelled_as"]
    # 32 KiB on 8 x A100: LL, 6.6 + 14 x 0.6 us + 1.75 x 32 KiB at half of 0.822 x 300 GB/s, + 3 us launch
    ll = 6.6e-6 + 14 * 0.6e-6 + 1.75 * 32768 / (0.5 * 0.822 * 300e9) + 3e-6
    assert a100["blind_s"] == pytest.approx(ll, rel=1e-4)


@pytest.mark.parametrize("text,field", [
    ("system,collective,algorithm,size_bytes,metric,value_GBps,source\n", "note"),
    ("system,collective,algorithm,size_bytes,metric,value_GBps,source,note\nh200-8,all_reduce,ring,1024,busbw,-3,x,\n",
     "value_GBps"),
    ("system,collective,algorithm,size_bytes,metric,value_GBps,source,note\nh200-8,broadcast,ring,1024,busbw,3,x,\n",
     "collective"),
    ("system,collective,algorithm,size_bytes,metric,value_GBps,source,note\nh200-8,all_reduce,ring,1024,busbw,3,,\n",
     "source"),
])
def test_bad_dataset_is_one_error_naming_file_and_field(tmp_path, text, field):
    (tmp_path / "bad.csv").write_text(text)
    with pytest.raises(ConfigError) as err:
        val.load_datasets(tmp_path)
    assert err.value.field == field and "bad.csv" in err.value.source


def test_cli_summary_json_and_unknown_dataset(capsys):
    assert main(["validate", "--summary", "--dataset", "h200_8_nccl_16GiB"]) == 0
    out = capsys.readouterr().out
    assert "h200_8_nccl_16GiB" in out and "blind" in out and "calibrated" in out
    assert main(["validate", "--json", "--dataset", "deepep_h800_intranode_all_to_all"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["datasets"][0]["rows"][0]["metric"] == "nvlink_bw"
    assert main(["validate", "--dataset", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a dataset" in err[0]


def test_notebook_runs(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(ROOT / "notebooks" / "04_calibration_and_validation.ipynb", as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")      # stored clean
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute(env=env)
    outs = [o for c in nb.cells for o in c.get("outputs", [])]
    assert not [o for o in outs if o.get("output_type") == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outs) >= 3      # oracle, calibration, validation
    md = "\n".join(o["data"]["text/markdown"] for o in outs if "text/markdown" in o.get("data", {}))
    for needle in ("Largest disagreement", "Held-out whole steps", "Blind target"):
        assert needle in md, needle
