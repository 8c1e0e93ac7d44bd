"""The compiler oracle: its HLO readers against XLA's own cost analysis and hand-written HLO, the
model's side by hand, and (in a subprocess with 8 host devices) the model's FLOPs and collective
bytes within 1 % of the compiled reference step for several plans and two models (and, with 40
host devices, on a system whose last domain is partial)."""

import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

import perfmodel as pm
from perfmodel import oracle
from perfmodel import reference as ref

DCN_SMALL = """
name = "dcn-small"
global_batch = 1024
dense_dtype = "bf16"
param_bytes = 4
activation_bytes = 2
dense_optimizer = "adam"
[embeddings]
dim = 32
bytes_per_element = 4
optimizer = "rowwise_adagrad"
index_bytes = 8
names = ["u", "v", "w", "x", "y"]
rows = [100000, 4000, 300, 25000, 7]
pooling = [4, 1, 2, 8, 1]
[[dense.layers]]
kind = "mlp"
name = "bottom_mlp"
stage = "bottom"
input = 13
widths = [64, 32]
[[dense.layers]]
kind = "dcnv2"
name = "cross"
stage = "top"
width = 192
layers = 2
low_rank = 48
[[dense.layers]]
kind = "mlp"
name = "top_mlp"
stage = "top"
input = 192
widths = [128, 64, 1]
"""


def test_dot_flops_read_from_hlo_are_xlas_own_count():
    """On a GEMM-only program the dots read from the HLO carry exactly cost_analysis's FLOPs."""
    def f(a, b, c, x):
        return (a @ b) @ c + jnp.einsum("bfd,bgd->bfg", x, x).sum()
    args = (jnp.ones((64, 48)), jnp.ones((48, 32)), jnp.ones((32, 16)), jnp.ones((8, 5, 12)))
    lowered = jax.jit(f).lower(*args)
    dots = oracle.hlo_dots(lowered.as_text(dialect="hlo", debug_info=True))
    assert sum(d["flops"] for d in dots) == 2 * (64 * 48 * 32 + 64 * 32 * 16 + 8 * 5 * 5 * 12)
    ca = lowered.compile().cost_analysis()
    ca = ca[0] if isinstance(ca, (list, tuple)) else ca
    adds = 64 * 16 + 8 * 5 * 5                           # the + and the sum: elementwise, counted too
    assert float(ca["flops"]) == pytest.approx(sum(d["flops"] for d in dots) + adds, rel=0.01)


HLO = """
  %all-to-all.3 = (f32[1,64,256]{2,1,0}, f32[1,64,256]{2,1,0}) all-to-all(%a, %b), channel_id=1, replica_groups={{0,1}}, metadata={op_name="jit(step)/shard_map/transpose(jvp(output_dist))/all_to_all"}
  %all-reduce = (f32[], f32[13,256]{1,0}) all-reduce(%x, %y), channel_id=2, replica_groups={{0,1}}, to_apply=%r, metadata={op_name="jit(step)/shard_map/(loss/psum:dense_sync/psum)"}
  %reduce_scatter.7 = bf16[512,256]{1,0} reduce-scatter(%z), channel_id=3, replica_groups=[1,8]<=[8], dimensions={0}, to_apply=%r, metadata={op_name="jit(step)/shard_map/jvp(output_dist)/reduce_scatter"}
  %ag-start = (s32[512,3]{1,0}, s32[4096,3]{1,0}) all-gather-start(%i), channel_id=4, replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}, metadata={op_name="jit(step)/shard_map/input_dist/all_gather"}
  %ag-done = s32[4096,3]{1,0} all-gather-done(%ag-start)
"""


def test_collectives_read_from_hlo_by_hand():
    c = oracle.hlo_collectives(HLO, 8)
    assert [x["kind"] for x in c] == ["all-to-all", "all-reduce", "all-reduce", "reduce-scatter", "all-gather"]
    assert c[0]["bytes"] == 2 * 64 * 256 * 4 and c[0]["backward"]          # one exchange of two chunks
    assert c[1]["bytes"] == 4 and c[1]["op_name"] == "jit(step)/shard_map/loss/psum"   # a combined all-reduce,
    assert c[2]["bytes"] == 13 * 256 * 4 and c[2]["op_name"].endswith("shard_map/dense_sync/psum")  # split
    assert c[3]["buffer_bytes"] == 8 * 512 * 256 * 2 and c[3]["group"] == 8  # the reduced buffer, iota groups
    assert c[4]["bytes"] == 4096 * 3 * 4                                     # the gathered result
    v = oracle.hlo_volumes(c, 8)
    assert v[("grad_dist", "all-to-all")][0] == pytest.approx(2 * 64 * 256 * 4 * 7 / 8)
    assert v[("input_dist", "all-gather")][0] == pytest.approx(4096 * 3 * 4 * 7 / 8 / 8)


def test_model_side_by_hand():
    spec = ref.load_spec("dlrm-small")
    model = ref.cost_model(spec)
    system = pm.load_system("h100-8")
    b = spec.global_batch / 8
    f = oracle.model_flops(model, b)
    mlp = 2 * b * (13 * 256 + 256 * 64)
    assert f["bottom_mlp"]["counted"] == pytest.approx(3 * mlp)
    assert f["bottom_mlp"]["like_for_like"] == pytest.approx(3 * mlp - 2 * b * 13 * 256)   # no dX of layer 1
    plan = pm.plan_from_dict(oracle.named_plan("table_wise", spec, 8), system, model)
    vol = oracle.model_volumes(system, model, plan)
    # one 64-wide fp32 table per device: each sends its pooled [b, 64] to 7 peers
    assert vol[("output_dist", "all-to-all")] == pytest.approx(7 * b * 64 * 4)
    # device r receives table r's indices (pooling P_r) from the 7 others: the largest is P = 20
    assert vol[("input_dist", "all-to-all")] == pytest.approx(7 * b * 20 * 4)
    assert vol[("dense_sync", "all-reduce")] == pytest.approx(float(model.dense.params()) * 4)


def test_unknown_plan_and_option_are_one_clear_error():
    spec = ref.load_spec("dlrm-small")
    with pytest.raises(ValueError, match="known: table_wise"):
        oracle.named_plan("diagonal", spec, 8)
    with pytest.raises(pm.ConfigError, match="unknown option"):
        oracle.parse_case("dlrm-small:table_wise+zero3", lambda m: spec, 8, pm.load_system("h100-8"), ref.cost_model)


def test_model_within_one_percent_of_the_compiled_step(tmp_path):
    """Several plans of two models, compiled for 8 host devices in one subprocess: FLOPs per dense
    layer and in total, and the bytes of every collective, within 1 %."""
    dcn = tmp_path / "dcn-small.toml"
    dcn.write_text(DCN_SMALL)
    cases = ["dlrm-small:table_wise", "dlrm-small:column_wise+a2a_bf16", "dlrm-small:mixed+fsdp",
             f"{dcn}:row_wise+grad_bf16", f"{dcn}:data_parallel"]
    args = [sys.executable, "-m", "perfmodel.oracle", "--json"] + [a for c in cases for a in ("--case", c)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout)
    kinds = set()
    for r in results:
        layers = {f["layer"] for f in r["flops"]}
        assert {"bottom_mlp", "top_mlp", "total"} <= layers and ("interaction" in layers or "cross" in layers)
        for f in r["flops"]:
            assert f["xla"] > 0 and abs(f["rel_err"]) < 0.01, (r["case"], f)
        assert r["unattributed_dot_flops"] == 0
        # the compiled module's total adds elementwise work, never less than the GEMMs
        assert r["compiled_cost_analysis_flops"] >= r["flops"][-1]["xla"] * 0.999
        assert not r["unmatched"], (r["case"], r["unmatched"])
        for c in r["collectives"]:
            assert c["xla_ops"] >= 1 and abs(c["rel_err"]) < 0.01, (r["case"], c)
            kinds.add(c["kind"])
    assert kinds == {"all-to-all", "all-reduce", "reduce-scatter", "all-gather"}


def test_model_within_one_percent_on_a_partial_system():
    """mtia300-40 (racks of 16, 16 and 8) compiled for 40 host devices: every collective of a
    mixed plan (table-wise, column-wise, row-wise, data-parallel tables; dense fully sharded) in
    the model's bytes as in XLA's, per device, as on a full system."""
    args = [sys.executable, "-m", "perfmodel.oracle", "--system", "mtia300-40", "--json", "--batch", "2560",
            "--case", "dlrm-small:mixed+fsdp"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (r,) = json.loads(proc.stdout)
    assert r["devices"] == 40 and not r["unmatched"]
    assert {c["kind"] for c in r["collectives"]} == {"all-to-all", "all-reduce", "reduce-scatter", "all-gather"}
    for c in r["collectives"]:
        assert c["xla_ops"] >= 1 and abs(c["rel_err"]) < 0.01, c
    for f in r["flops"]:
        assert abs(f["rel_err"]) < 0.01, f
