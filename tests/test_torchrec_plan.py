"""A full TorchRec plan out, without torchrec: the dict form's shards against hand-computed offsets
and sizes (uneven row blocks as TorchRec splits them), kernels and cache params, its errors, and
`perfmodel search --format torchrec`. tests_torchrec/ checks it against TorchRec itself."""

import json
import sys

import pytest

import perfmodel as pm
from perfmodel import ConfigError, TablePlan
from perfmodel.cli import main
from perfmodel.interop.torchrec_plan import column_block, load_torchrec_plan, row_blocks

MODULE = "sparse_arch.embedding_bag_collection"


def test_row_blocks_are_torchrecs():
    """ceil(rows / n) per rank, then the remainder, then nothing (TorchRec's own docstring examples:
    10 rows on 4 ranks are 3, 3, 3, 1; 5 rows are 2, 2, 1, 0)."""
    assert row_blocks(10, 4) == [3, 3, 3, 1]
    assert row_blocks(5, 4) == [2, 2, 1, 0]
    assert row_blocks(16, 4) == [4, 4, 4, 4]
    assert row_blocks(3, 8) == [1, 1, 1, 0, 0, 0, 0, 0]
    assert row_blocks(100, 16) == [7] * 14 + [2, 0]


def test_column_block_is_torchrecs():
    assert column_block(128, 4) == 32 and column_block(128, 8) == 16
    assert column_block(40, 4) == 20          # 10 is no multiple of 4: the next divisor that is
    assert column_block(100, 2) == 100        # none: one shard of the whole dim


@pytest.fixture(scope="module")
def case():
    """h100-16 (two scale-up domains of 8) and five tables, one per sharding type."""
    tables = [dict(name=n, num_embeddings=r, embedding_dim=d, feature_names=[f"f_{n}"], pooling_factor=1)
              for n, r, d in (("rw", 100, 64), ("twrw", 10, 64), ("cw", 1000, 64), ("tw", 500, 64), ("dp", 20, 64),
                              ("odd", 30, 40))]
    model = pm.model_from_tables(tables, dense="dlrm-dcnv2-mlperf")
    system = pm.load_system("h100-16")
    plan = pm.Plan(tables={
        "rw": TablePlan("row_wise", list(range(16))),
        "twrw": TablePlan("table_row_wise", list(range(8, 16)), 0.5),
        "cw": TablePlan("column_wise", [5, 2, 9, 12]),
        "tw": TablePlan("table_wise", [11], 0.25),
        "dp": TablePlan("data_parallel", list(range(16))),
        "odd": TablePlan("table_wise", [0]),
    })
    return system, model, plan


def test_shards_offsets_sizes_and_placements(case):
    system, model, plan = case
    out = pm.torchrec_plan(plan, system, model)
    assert (out["world_size"], out["local_size"], out["device_type"]) == (16, 8, "cuda")
    t = out["plan"][MODULE]
    shards = lambda name: [(s["shard_offsets"], s["shard_sizes"], s["placement"]) for s in t[name]["shards"]]
    # row-wise: 100 rows on 16 ranks in blocks of 7: ranks 0-13 hold 7, rank 14 the last 2, rank 15 none
    rw = shards("rw")
    assert [s[1] for s in rw] == [[7, 64]] * 14 + [[2, 64], [0, 64]]
    assert [s[0] for s in rw] == [[7 * i, 0] for i in range(15)] + [[100, 0]]
    assert rw[15][2] == "rank:15/cuda:7" and t["rw"]["ranks"] == list(range(16))
    # table-row-wise inside the second host: 10 rows in blocks of 2 on ranks 8-12, none on 13-15
    assert shards("twrw") == [([2 * min(i, 5), 0], [2 if i < 5 else 0, 64], f"rank:{8 + i}/cuda:{i}") for i in range(8)]
    assert t["twrw"]["ranks"] == list(range(8, 16))
    assert t["twrw"]["compute_kernel"] == "fused_uvm_caching" and t["twrw"]["cache_params"] == {"load_factor": 0.5}
    # column-wise: shard j of 16 columns on the plan's j-th rank, in the plan's order
    assert shards("cw") == [([0, 16 * j], [1000, 16], f"rank:{r}/cuda:{r % 8}") for j, r in enumerate([5, 2, 9, 12])]
    assert t["cw"]["ranks"] == [5, 2, 9, 12] and t["cw"]["compute_kernel"] == "fused" and "cache_params" not in t["cw"]
    assert shards("tw") == [([0, 0], [500, 64], "rank:11/cuda:3")]
    assert t["tw"]["cache_params"] == {"load_factor": 0.25}
    # data-parallel: no sharding spec (TorchRec's serialization has no shards), the dense kernel
    assert t["dp"] == {"sharding_type": "data_parallel", "compute_kernel": "dense", "ranks": list(range(16))}
    # the same kernels and ranks as Plan.torchrec()
    short = plan.torchrec()
    assert all(short[n] == {k: t[n][k] for k in ("sharding_type", "ranks", "compute_kernel")} for n in short)
    cpu = pm.torchrec_plan(plan, system, model, device_type="cpu", module_path="model.ebc")
    assert cpu["plan"]["model.ebc"]["tw"]["shards"][0]["placement"] == "rank:11/cpu"


def test_errors(case, monkeypatch):
    system, model, plan = case
    odd = pm.Plan(tables={**plan.tables, "odd": TablePlan("column_wise", [0, 1, 2, 3])})
    with pytest.raises(ConfigError, match=r"tables\.odd\.ranks': column_wise over 4 ranks makes shards of 10 columns; "
                                          r"TorchRec's are a multiple of 4 columns wide and it would make 2 shard\(s\) of 20"):
        pm.torchrec_plan(odd, system, model)
    with pytest.raises(ConfigError, match="field 'device_type': is 'gpu'; allowed: cuda, mtia, cpu"):
        pm.torchrec_plan(plan, system, model, device_type="gpu")
    bad = pm.Plan(tables={**plan.tables, "tw": TablePlan("table_wise", [16])})
    with pytest.raises(ConfigError, match="rank 16 does not exist"):
        pm.torchrec_plan(bad, system, model)
    monkeypatch.setitem(sys.modules, "torchrec", None)          # torchrec absent (whether or not it is here)
    monkeypatch.setitem(sys.modules, "torchrec.distributed.types", None)
    with pytest.raises(ImportError, match=r"to_torchrec_plan needs torchrec .*pm\.torchrec_plan\(plan, system, model\)"):
        pm.to_torchrec_plan(plan, system, model)



@pytest.mark.parametrize("field, value", [("sync_every", -5), ("sync_every", 2.7), ("sync_every", float("inf")),
                                          ("sync_every", True), ("use_inter_host_allreduce", "no"),
                                          ("use_inter_host_allreduce", 1), ("world_size", True),
                                          ("world_size", 16.0), ("sharding_group_size", 3)])
def test_dmp_collection_args_refuse_a_bad_field(case, field, value, monkeypatch):
    """DMPCollection's arguments came back as given or coerced: sync_every -5 as -5, 2.7 as 2 (inf an
    OverflowError), use_inter_host_allreduce "no" as True, world_size true accepted. Each is one
    ConfigError naming the source and the field, raised before torchrec is needed."""
    system, model, plan = case
    two_groups = dict(world_size=16, sharding_group_size=8, use_inter_host_allreduce=False, sync_every=4)
    data = {**pm.torchrec_plan(plan, system, model), **two_groups, field: value}
    monkeypatch.setitem(sys.modules, "torchrec", None)          # the checks come before torchrec is imported
    monkeypatch.setitem(sys.modules, "torchrec.distributed.types", None)
    with pytest.raises(ConfigError) as e:
        pm.dmp_collection_args(data, src="p.json")
    assert e.value.source == "p.json" and e.value.field == field and "must be" in e.value.message
    good = {k: v for k, v in data.items() if k != field}
    if field != "world_size":            # the same dict without the bad field passes the checks
        with pytest.raises(ImportError, match="needs torchrec"):
            pm.dmp_collection_args(good, src="p.json")

def test_cli_search_writes_the_torchrec_form(tmp_path, capsys, monkeypatch):
    out = tmp_path / "plan.json"
    assert main(["search", "--system", "mtia300-4", "--model", "dlrm-small", "--method", "greedy", "--no-progress",
                 "--out", str(out), "--format", "torchrec", "--torchrec-module", "model.sparse_arch.ebc"]) == 0
    assert "TorchRec sharding plan written to" in capsys.readouterr().out
    data = json.loads(out.read_text())
    system, model = pm.load_system("mtia300-4"), pm.load_model("dlrm-small")
    assert set(data["plan"]["model.sparse_arch.ebc"]) == set(model.tables.names)
    again = pm.torchrec_plan(pm.default_plan(system, model), system, model, module_path="model.sparse_arch.ebc")
    assert data["plan"] == again["plan"]                     # greedy's plan, the same dicts
    assert main(["search", "--system", "mtia300-4", "--model", "dlrm-small", "--method", "greedy",
                 "--torchrec-module", "x"]) == 2
    assert "'--torchrec-module': is for --format torchrec" in capsys.readouterr().err
    # a JSON that is not a TorchRec plan: one clear error, before torchrec is looked for
    broken = tmp_path / "broken.json"
    t = data["plan"]["model.sparse_arch.ebc"]
    name = next(n for n in t if "shards" in t[n])
    t[name]["shards"][0]["shard_sizes"] = [-1, 64]
    broken.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=rf"broken\.json: field 'plan\.model\.sparse_arch\.ebc\.{name}\.shards': must be a list"):
        load_torchrec_plan(broken)


def test_a_torchrec_plan_file_reads_back_as_the_plan_it_was(case, tmp_path):
    """TorchRec's plan holds the shards only; the file carries perfmodel's whole plan beside them, so
    evaluate --plan prices what the search predicted (dense mode, algorithms, buckets and chunks included)."""
    system, model, plan = case
    plan = pm.Plan(tables=plan.tables, dense="fully_sharded", grad_buckets=3, overlap_chunks=2, offload=False)
    data = pm.torchrec_plan(plan, system, model)
    (tmp_path / "tr.json").write_text(json.dumps(data))
    back = pm.load_plan(tmp_path / "tr.json", system, model)
    assert back.to_dict() == plan.to_dict()
    del data["perfmodel_plan"]                                   # a TorchRec plan from elsewhere
    (tmp_path / "bare.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"bare.json: field 'plan': is a TorchRec sharding plan without perfmodel's "
                                          r"own plan"):
        pm.load_plan(tmp_path / "bare.json", system, model)
