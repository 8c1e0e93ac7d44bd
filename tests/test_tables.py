"""Tables in: model_from_tables on TorchRec-style configs (a stand-in for EmbeddingBagConfig), dicts
and CSV rows; lookups, outputs and dense widths against hand counts; one ConfigError per bad table;
`perfmodel import-tables` writes a model file that loads back to the same model. No compile."""

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import jax
import numpy as np
import pytest

import perfmodel as pm
from perfmodel import ConfigError
from perfmodel.cli import main
from perfmodel.interop.tables import import_tables

README = Path(__file__).resolve().parents[1] / "README.md"
TORCHREC_DOC = Path(__file__).resolve().parents[1] / "docs" / "torchrec.md"


class DataType(Enum):          # TorchRec's enums are read by value
    FP32 = "FP32"
    FP16 = "FP16"


class PoolingType(Enum):
    SUM = "SUM"
    NONE = "NONE"


@dataclass
class EmbeddingBagConfig:      # the fields of torchrec.EmbeddingBagConfig that perfmodel reads
    num_embeddings: int
    embedding_dim: int
    name: str = ""
    data_type: DataType = DataType.FP32
    feature_names: list = field(default_factory=list)
    pooling: PoolingType = PoolingType.SUM


def configs():
    return [EmbeddingBagConfig(1000, 64, "user", feature_names=["user_id"]),
            EmbeddingBagConfig(50, 64, "item", DataType.FP16, ["item_id", "item_hist"]),
            EmbeddingBagConfig(7, 64, "geo", feature_names=["country"])]


POOL = {"user_id": 1.0, "item_id": 1.0, "item_hist": 20.0, "country": 2.5}


def test_shared_features_add_lookups_and_outputs():
    m = pm.model_from_tables(configs(), pooling_factors=POOL, dense="dlrm-small", global_batch=512)
    tb = m.tables
    assert tb.names == ("user", "item", "geo")
    np.testing.assert_array_equal(tb.rows, [1000, 50, 7])
    np.testing.assert_array_equal(tb.pooling, [1.0, 21.0, 2.5])        # item: 1 + 20 lookups
    np.testing.assert_array_equal(tb.output_per_sample(), [1, 2, 1])   # item: one pooled vector per feature
    np.testing.assert_array_equal(tb.bytes_per_element, [4, 2, 4])     # FP16 item table
    assert tb.feature_names == (("user_id",), ("item_id", "item_hist"), ("country",))
    assert float(m.global_batch) == 512


def test_dot_interaction_widths_follow_the_features():
    """dlrm-small's dense part (bottom 13-256-64, dot, top 512-256-1) on 4 features of dim 32: the
    bottom MLP ends at 32, the dot takes 4 + 1 = 5 vectors (a 5 x 5 x 32 GEMM), and the top MLP
    takes 5 x 4 / 2 + 32 = 42."""
    tables = [dict(name=c.name, num_embeddings=c.num_embeddings, embedding_dim=32, feature_names=c.feature_names)
              for c in configs()]
    m = pm.model_from_tables(tables, pooling_factors=POOL, dense="dlrm-small")
    d = m.dense
    gemms = list(zip(d.layer, np.asarray(d.m).astype(int), np.asarray(d.n).astype(int), np.asarray(d.k).astype(int)))
    assert gemms == [("bottom_mlp", 1, 256, 13), ("bottom_mlp", 1, 32, 256), ("interaction", 5, 5, 32),
                     ("top_mlp", 1, 512, 42), ("top_mlp", 1, 256, 512), ("top_mlp", 1, 1, 256)]
    assert float(m.global_batch) == 4096                 # the preset's batch when none is given


def test_dcnv2_width_is_the_sum_of_feature_outputs_and_the_bottom_output():
    """MLPerf's DCNv2 on the 4 features of dim 64: bottom 13-512-256-64, cross width 4 x 64 + 64 =
    320; with dims 64, 64, 32 the bottom keeps its 128 and the width is 64 + 2 x 64 + 32 + 128 = 352."""
    m = pm.model_from_tables(configs(), pooling_factors=POOL)
    d = m.dense
    cross = [(int(n), int(k)) for name, n, k in zip(d.layer, np.asarray(d.n), np.asarray(d.k)) if name == "interaction"]
    assert cross[:2] == [(512, 320), (320, 512)]         # low rank 512 of width 320
    assert int(np.asarray(d.n)[2]) == 64                 # bottom MLP ends at the embedding dim
    mixed = configs()
    mixed[2].embedding_dim = 32
    d = pm.model_from_tables(mixed, pooling_factors=POOL).dense
    assert int(np.asarray(d.n)[2]) == 128 and int(np.asarray(d.k)[3]) == 352
    assert int(np.asarray(d.k)[d.layer.index("top_mlp")]) == 352


def test_explicit_layers_are_taken_as_they_are():
    layers = [{"kind": "mlp", "name": "tower", "stage": "top", "input": 256, "widths": [64, 1]}]
    m = pm.model_from_tables(configs(), pooling_factors=2.0, dense=layers, global_batch=256)
    np.testing.assert_array_equal(m.dense.k, [256, 64])
    np.testing.assert_array_equal(m.tables.pooling, [2.0, 4.0, 2.0])    # one number for every feature


def test_a_sequence_feature_needs_explicit_layers():
    cfg = configs()
    cfg[1].pooling = PoolingType.NONE
    with pytest.raises(ConfigError, match=r"interaction.*takes pooled features; table 'item' is an unpooled sequence"):
        pm.model_from_tables(cfg, pooling_factors=POOL)
    layers = [{"kind": "mlp", "name": "tower", "stage": "top", "input": 64, "widths": [1]}]
    m = pm.model_from_tables(cfg, pooling_factors=POOL, dense=layers)
    np.testing.assert_array_equal(m.tables.output_per_sample(), [1, 21, 1])   # a vector per lookup


def _error(tables, **kw) -> str:
    with pytest.raises(ConfigError) as info:
        pm.model_from_tables(tables, **{"pooling_factors": POOL, **kw})
    return str(info.value)


def _with(i, **changes):
    cfg = configs()
    for k, v in changes.items():
        setattr(cfg[i], k, v)
    return cfg


@pytest.mark.parametrize("tables, message", [
    (_with(2, name="user"), "field 'tables[2].name': table 'user' is also tables[0]; names must be distinct"),
    (_with(2, feature_names=["user_id"]), "field 'tables[2] ('geo').feature_names': feature 'user_id' is also on "
                                          "table 'user'; a feature reads one table"),
    (_with(1, embedding_dim=0), "field 'tables[1] ('item').embedding_dim': must be an integer >= 1 and <= 100000"),
    (_with(1, embedding_dim=12.5), "field 'tables[1] ('item').embedding_dim': must be an integer"),
    (_with(0, num_embeddings=-3), "field 'tables[0] ('user').num_embeddings': must be an integer >= 1"),
    (_with(0, data_type="FP64"), "field 'tables[0] ('user').data_type': is 'FP64'; allowed: FP32, FP16, BF16"),
    (_with(0, feature_names=[]), "field 'tables[0] ('user').feature_names': must list the table's features"),
    (_with(0, feature_names=["a", "a"]), "feature 'a' twice"),
    (_with(0, name=""), "field 'tables[0].name': must be a non-empty table name"),
    ([], "field 'tables': is empty"),
])
def test_bad_tables_name_the_table_and_the_field(tables, message):
    assert message in _error(tables)


def test_pooling_factor_errors():
    assert "field 'tables[2] ('geo').pooling_factor': is missing for feature 'country'" in _error(
        configs(), pooling_factors={k: v for k, v in POOL.items() if k != "country"})
    assert "field 'pooling_factors['cuontry']': is not a feature of any table" in _error(
        configs(), pooling_factors={**POOL, "cuontry": 1.0})
    assert "field 'pooling_factors['item_hist']': must be a finite number >= 0.001" in _error(
        configs(), pooling_factors={**POOL, "item_hist": -1.0})
    rows = [dict(name="t", num_embeddings=10, embedding_dim=8, feature_names=["a", "b"], pooling_factor=[1, 2, 3])]
    assert "field 'tables[0] ('t').pooling_factor': has 3 values for 2 features (a, b)" in _error(rows, pooling_factors=None)
    rows[0]["pooling_factor"] = 2
    assert "feature 'a' has a pooling factor here and in pooling_factors" in _error(rows, pooling_factors={"a": 1})
    assert "field 'dense': must be a model preset name or file" in _error(configs(), dense=3)


CSV = """name,num_embeddings,embedding_dim,feature_names,pooling_factor,data_type
user,1000000,128,user_id,1,FP32
item,5000000,128,item_id;item_hist,1;20,FP16
geo,100,128,country,,
"""


def test_import_tables_round_trip(tmp_path, capsys):
    csv, out = tmp_path / "tables.csv", tmp_path / "model.toml"
    csv.write_text(CSV)
    assert main(["import-tables", str(csv), "--dense", "dlrm-dcnv2-mlperf", "--batch", "65536",
                 "--pooling-factor", "2", "--out", str(out)]) == 0
    # pooling factors are per feature (TorchRec's): the output says what a shared table adds up to
    assert "1 table(s) read by several features look up each feature's pooling factor per sample, summed: " \
           "item 1 + 20 = 21 rows per sample" in capsys.readouterr().out
    text = out.read_text()
    for line, name in ((2, "user"), (3, "item"), (4, "geo")):        # a source line per table: file and row
        assert f'"{name}",' in text and f"# source: {csv} row {line}" in text
    back = pm.load_model(out)
    direct = pm.model_from_tables(csv, pooling_factors=2.0, global_batch=65536, name="tables")
    assert back.name == "tables" and back.tables.feature_names == direct.tables.feature_names
    assert back.dense.layer == direct.dense.layer
    for a, b in zip(jax.tree_util.tree_leaves(back), jax.tree_util.tree_leaves(direct)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(back.tables.pooling, [1, 21, 2])
    # the cross network on 4 features of 128 and the bottom MLP's 128: 640 wide
    assert int(np.asarray(back.dense.k)[3]) == 640
    # never overwritten
    assert main(["import-tables", str(csv), "--batch", "65536", "--out", str(out)]) == 2
    assert "exists already" in capsys.readouterr().err and out.read_text() == text


@pytest.mark.parametrize("csv, message", [
    ("name,rows,embedding_dim,feature_names\n", "field 'header': lacks column 'num_embeddings'"),
    ("name,num_embeddings,embedding_dim,feature_names,colour\n", "column 'colour' is not a table field"),
    ("name,num_embeddings,embedding_dim,feature_names\nt,ten,8,a\n",
     "field 'row 2 ('t').num_embeddings': must be an integer >= 1"),
    ("name,num_embeddings,embedding_dim,feature_names\nt,10,8,a\n",
     "field 'row 2 ('t').pooling_factor': is missing for feature 'a'"),
    ("name,num_embeddings,embedding_dim,feature_names\nt,10,8,a,5\n", "field 'row 2': has more cells than the header"),
])
def test_bad_csv_names_the_file_row_and_field(tmp_path, csv, message):
    path, out = tmp_path / "t.csv", tmp_path / "m.toml"
    path.write_text(csv)
    with pytest.raises(ConfigError) as info:
        import_tables(path, out)
    assert str(info.value).startswith(f"{path}: ") and message in str(info.value)
    assert not out.exists()


def test_readme_torchrec_path_runs_with_a_stand_in(monkeypatch):
    """docs/torchrec.md's TorchRec snippet, run as written, with this file's stand-in as torchrec's
    EmbeddingBagConfig and a cheap search (the snippet's search is the real one; its last line,
    to_torchrec_plan, needs torchrec: tests_torchrec runs the whole of it)."""
    import sys, types
    text = TORCHREC_DOC.read_text()
    snippet = text.split("<!-- torchrec-path -->")[1].split("```python")[1].split("```")[0]
    assert len(snippet.strip().splitlines()) < 15
    fake = types.ModuleType("torchrec")
    fake.EmbeddingBagConfig = EmbeddingBagConfig
    monkeypatch.setitem(sys.modules, "torchrec", fake)
    real_search = pm.search
    monkeypatch.setattr(pm, "search", lambda s, m, **kw: real_search(s, m, method="greedy"))
    body = snippet.replace("sharding_plan = pm.to_torchrec_plan(", "sharding_plan = pm.torchrec_plan(")
    scope = {}
    exec(compile(body, str(TORCHREC_DOC), "exec"), scope)
    tables = scope["sharding_plan"]["plan"]["sparse_arch.embedding_bag_collection"]
    assert set(tables) == {c.name for c in scope["tables"]}


def test_readme_torchrec_path_without_torchrec_runs_as_written(monkeypatch):
    """The README's second snippet needs no torchrec: dicts in, TorchRec's serialized plan out (a cheap
    search in place of the snippet's real one)."""
    text = README.read_text()
    snippet = text.split("<!-- torchrec-path-dicts -->")[1].split("```python")[1].split("```")[0]
    assert len(snippet.strip().splitlines()) < 15 and "torchrec import" not in snippet
    real_search = pm.search
    monkeypatch.setattr(pm, "search", lambda s, m, **kw: real_search(s, m, method="greedy"))
    scope = {}
    exec(compile(snippet, str(README), "exec"), scope)
    tables = scope["plan_json"]["plan"]["sparse_arch.embedding_bag_collection"]
    assert set(tables) == {"user", "item", "geo"} and scope["plan_json"]["world_size"] == 16
    assert scope["plan_json"]["perfmodel_plan"] == scope["result"].plan.to_dict()


def test_numpy_scalars_read_as_numbers():
    """Tables built from arrays (a data frame's rows) hold numpy scalars."""
    rows = [dict(name="t", num_embeddings=np.int64(1000), embedding_dim=np.int32(64), feature_names=["a"])]
    m = pm.model_from_tables(rows, pooling_factors={"a": np.float32(2.5)})
    assert float(m.tables.rows[0]) == 1000 and float(m.tables.pooling[0]) == 2.5
    assert main(["import-tables", "x.csv", "--pooling-factor", "0", "--out", "never.toml"]) == 2


def test_the_example_tables_are_mlperfs():
    """data/examples/mlperf_dlrm_dcnv2_tables.csv, the example the docs import, holds the MLPerf preset's
    tables: the same rows, dims and lookups per sample, so a search on either places the same tables."""
    example = pm.model_from_tables(Path(__file__).resolve().parents[1] / "data" / "examples" / "mlperf_dlrm_dcnv2_tables.csv")
    preset = pm.load_model("dlrm-dcnv2-mlperf")
    for f in ("rows", "dim", "pooling", "bytes_per_element"):
        np.testing.assert_array_equal(np.asarray(getattr(example.tables, f)), np.asarray(getattr(preset.tables, f)), f)
