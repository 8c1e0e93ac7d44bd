"""Compiler oracle: the XLA compiler's own counts for the reference step, next to the model's.

For a (system, model, plan), the reference step (perfmodel.reference) is sharded as the plan says
over the system's D devices (forced host devices on a CPU), lowered and compiled by XLA, and:

  FLOPs        every dot in the module XLA compiles, counted as XLA's HloCostAnalysis counts a
               dot (2 x output elements x contracted size), attributed to the dense layer whose
               jax.named_scope it carries; next to the model's GEMM FLOPs per layer (compute.py:
               forward 2 b m n k, backward dX + dW). The compiled module's cost_analysis total is
               reported too: it adds the elementwise work (activations, optimizers, pooling sums)
               that the model charges as memory traffic, not FLOPs.
  collectives  every all-to-all, all-reduce, reduce-scatter and all-gather in the *compiled* HLO,
               with its byte size, attributed to its phase by named scope; next to the volumes the
               model's embedding_costs and evaluate pass to the collective cost functions.

Like with like (what is compared, and why):

  all-to-all      bytes each device sends to its peers = operand x (D-1)/D, vs the model's
                  max over devices of max(send, recv). SPMD pads every device's chunk to the
                  largest, which is exactly the slowest device the model's time is set by.
  reduce-scatter  the buffer S each chip reduces (operand bytes) vs the model's S
  all-gather      the gathered buffer S (result bytes) vs the model's S
  all-reduce      the buffer S vs the model's S
  row_wise input  XLA cannot bucketize indices by owner with static shapes; it all-gathers them,
                  moving D x the indices TorchRec's bucketized all-to-all moves (the model's
                  volume): the comparison divides the HLO bytes by D.
  first dense GEMM  its input (the dense features) needs no gradient, so XLA computes no dX for
                  it; the model's dense_flops counts one (reported as "as counted" vs "like for
                  like", the latter asserted).

XLA_FLAGS must force the device count before JAX starts, so run it as its own process:

    python -m perfmodel.oracle --json --case dlrm-small:table_wise --case dlrm-small:mixed+fsdp
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from dataclasses import replace

COLLECTIVE_OPS = ("all-to-all", "all-reduce", "reduce-scatter", "all-gather")
DTYPE_BYTES = {"f64": 8, "s64": 8, "u64": 8, "f32": 4, "s32": 4, "u32": 4, "bf16": 2, "f16": 2, "s16": 2,
               "u16": 2, "s8": 1, "u8": 1, "pred": 1, "f8e4m3fn": 1, "f8e5m2": 1}
PLAN_NAMES = ("table_wise", "column_wise", "row_wise", "data_parallel", "mixed")
DEFAULT_CASES = (
    "dlrm-small:table_wise", "dlrm-small:column_wise+a2a_bf16", "dlrm-small:row_wise",
    "dlrm-small:data_parallel+grad_bf16", "dlrm-small:mixed+fsdp",
    "dlrm-dcnv2-mlperf:table_wise", "dlrm-dcnv2-mlperf:mixed+fsdp",
)
SUMMED_PHASES = ("dense_sync", "dp_sync")
_SHAPE = re.compile(r"(\w+)\[([\d,]*)\]")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.+?)\s+([\w\-]+)\((.*)$")


# ------------------------------------------------------------------------------------ HLO parsing

def _op_name(line: str) -> str:
    m = re.search(r'op_name="([^"]*)"', line)
    return m.group(1) if m else ""


def scopes(op_name: str) -> list[str]:
    """The path components of an op_name, wrappers such as jvp(...) / transpose(...) split off."""
    return [p for p in re.split(r"[/():]", op_name) if p]


def hlo_dots(text: str) -> list[dict]:
    """Every dot of an HLO module: its FLOPs (2 x output elements x contracted size, as XLA's
    HloCostAnalysis counts a dot) and op_name."""
    shapes, out = {}, []
    for line in text.splitlines():
        m = _INSTR.match(line)
        if not m:
            continue
        name, shape, op, rest = m.groups()
        s = _SHAPE.match(shape.strip())
        if s:
            shapes[name] = [int(x) for x in s.group(2).split(",") if x]
        if op != "dot":
            continue
        args = rest.split(")")[0]
        first = args.split(",")[0].strip()
        inline = _SHAPE.search(first)
        lhs = ([int(x) for x in inline.group(2).split(",") if x] if inline
               else shapes.get(first.split()[-1].lstrip("%"), None))
        cdims = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", line)
        if lhs is None or s is None:
            raise ValueError(f"cannot read the operands of: {line.strip()[:200]}")
        contracted = math.prod(lhs[int(i)] for i in cdims.group(1).split(",") if i) if cdims else 1
        outn = math.prod(int(x) for x in s.group(2).split(",") if x)
        out.append({"flops": 2.0 * outn * contracted, "op_name": _op_name(line), "shape": s.group(0)})
    return out


def _combined_parts(name: str) -> list[str]:
    """XLA names a combined op "prefix/(a:b:c)": the op_names "prefix/a", "prefix/b", "prefix/c"."""
    if not name.endswith(")"):
        return [name]
    depth = 0
    for i in range(len(name) - 1, -1, -1):        # the "(" that matches the final ")"
        depth += {")": 1, "(": -1}.get(name[i], 0)
        if depth == 0:
            break
    inner, prefix = name[i + 1:-1], name[:i]
    if (prefix and not prefix.endswith("/")) or ":" not in inner:
        return [name]
    parts, depth, cur = [], 0, ""
    for ch in inner:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == ":" and depth == 0:
            parts.append(prefix + cur)
            cur = ""
        else:
            cur += ch
    return parts + [prefix + cur]


def hlo_collectives(text: str, devices: int) -> list[dict]:
    """Every collective of an HLO module: kind, byte sizes and op_name (one entry per tuple element
    when XLA combined several collectives into one, attributed by the combined op_name's parts)."""
    out = []
    for line in text.splitlines():
        m = _INSTR.match(line)
        if not m:
            continue
        _, shape, op, rest = m.groups()
        kind = op[:-6] if op.endswith("-start") else op
        if kind not in COLLECTIVE_OPS or op.endswith("-done"):
            continue
        g = re.search(r"replica_groups=\{\{([\d,]*)\}", line)
        if g:
            group = len([x for x in g.group(1).split(",") if x])
        else:
            g = re.search(r"replica_groups=\[\d+,(\d+)\]", line)
            group = int(g.group(1)) if g else devices
        elems = _SHAPE.findall(shape)
        if op.endswith("-start") and kind == "all-gather" and len(elems) > 1:
            elems = elems[len(elems) // 2:]          # (operands..., results...)
        name = _op_name(line)
        parts = _combined_parts(name)
        sizes = [(dt, DTYPE_BYTES.get(dt, 4) * math.prod(int(x) for x in dims.split(",") if x)) for dt, dims in elems]
        if kind == "all-to-all":      # a tuple all-to-all is one exchange, its elements the chunks
            sizes = [(sizes[0][0], sum(n for _, n in sizes))]
            parts = [parts[0]] if len(set(parts)) == 1 else [name]
        for i, (dt, nbytes) in enumerate(sizes):
            part = parts[i] if len(parts) == len(sizes) else name
            buffer = nbytes * group if kind == "reduce-scatter" else nbytes
            out.append({"kind": kind, "dtype": dt, "bytes": float(nbytes), "buffer_bytes": float(buffer),
                        "group": group, "op_name": part, "backward": "transpose" in scopes(part)})
    return out


# ------------------------------------------------------------------------------------ plans

def named_plan(name: str, spec, D: int) -> dict:
    """A plan dict for the model's tables: table_wise (round robin), column_wise (2 shards),
    row_wise, data_parallel, or mixed (the four types in turn)."""
    tabs = {}
    for i, n in enumerate(spec.tables):
        kind = name if name != "mixed" else ("table_wise", "row_wise", "column_wise", "data_parallel")[i % 4]
        if kind == "table_wise":
            tabs[n] = {"sharding_type": kind, "ranks": [i % D]}
        elif kind == "column_wise":
            tabs[n] = {"sharding_type": kind, "ranks": [i % D, (i + D // 2 + 1) % D]}
        elif kind in ("row_wise", "data_parallel"):
            tabs[n] = {"sharding_type": kind, "ranks": list(range(D))}
        else:
            raise ValueError(f"unknown plan {name!r}; known: {', '.join(PLAN_NAMES)} or a plan JSON path")
    return {"tables": tabs}


def parse_case(case: str, spec_loader, D: int, system, model_of) -> tuple:
    """'MODEL:PLAN[+fsdp][+a2a_bf16][+grad_bf16]' (PLAN a name or a plan JSON) -> (spec, plan)."""
    from .config import ConfigError, read_file
    from .plan import plan_from_dict
    if ":" not in case:
        raise ConfigError("", "case", f"{case!r}: give MODEL:PLAN, e.g. dlrm-small:table_wise")
    mname, rest = case.split(":", 1)
    pname, *opts = rest.split("+")
    spec = spec_loader(mname)
    data = named_plan(pname, spec, D) if pname in PLAN_NAMES else read_file(pname)
    for o in opts:
        if o == "fsdp":
            data["dense"] = "fully_sharded"
        elif o in ("a2a_bf16", "a2a_fp32", "a2a_fp8"):
            data["a2a_precision"] = o[4:]
        elif o in ("grad_bf16", "grad_fp32", "grad_fp8"):
            data["grad_precision"] = o[5:]
        else:
            raise ConfigError("", "case", f"unknown option {o!r}; known: fsdp, a2a_bf16, grad_bf16")
    return spec, plan_from_dict(data, system, model_of(spec), case)


# ------------------------------------------------------------------------------ model side

def model_flops(model, local_batch: float) -> dict:
    """Per dense layer and in total, per device: the model's GEMM FLOPs of one training step
    ("as counted" by compute.dense_flops) and "like for like" (no dX for the network's first GEMM,
    whose input, the dense features, needs no gradient)."""
    import numpy as np
    d = model.dense
    fwd = 2.0 * local_batch * np.asarray(d.m) * np.asarray(d.n) * np.asarray(d.k)
    w = np.asarray(d.weighted)
    counted = fwd * (2.0 + w)
    like = counted.copy()
    first = list(d.bottom).index(True) if any(d.bottom) else 0
    like[first] -= fwd[first]                     # the dX of the first bottom GEMM
    out = {}
    for name in dict.fromkeys(d.layer):
        sel = np.asarray([l == name for l in d.layer])
        out[name] = {"counted": float(counted[sel].sum()), "like_for_like": float(like[sel].sum())}
    out["total"] = {"counted": float(counted.sum()), "like_for_like": float(like.sum())}
    return out


def model_volumes(system, model, plan) -> dict:
    """The byte counts the model gives each collective of the step, per device (see module doc)."""
    import jax.numpy as jnp
    import numpy as np
    from .cost.embedding import embedding_costs
    from .plan import PRECISION_BYTES, PRECISIONS, to_arrays
    pa = to_arrays(plan, system, model)
    a2a_b = PRECISION_BYTES[PRECISIONS.index(plan.a2a_precision)]
    grad_b = PRECISION_BYTES[PRECISIONS.index(plan.grad_precision)]
    kinds = np.asarray([plan.tables[n].sharding_type for n in model.tables.names])

    def emb(*types):
        mask = jnp.asarray(np.isin(kinds, types), jnp.float32)
        return embedding_costs(system, model, replace(pa, shard_type=pa.shard_type * mask[:, None]), a2a_b, grad_b)

    def a2a(send, recv):
        return float(jnp.max(jnp.sum(jnp.maximum(send, recv), axis=1)))
    p, rw, dp = emb("table_wise", "column_wise"), emb("row_wise"), emb("data_parallel")
    P_dense = float(model.dense.params())
    vol = {}
    if np.isin(kinds, ["table_wise", "column_wise"]).any():
        vol[("input_dist", "all-to-all")] = a2a(p.in_send, p.in_recv)
        vol[("output_dist", "all-to-all")] = a2a(p.out_send, p.out_recv)
        vol[("grad_dist", "all-to-all")] = vol[("output_dist", "all-to-all")]
    if (kinds == "row_wise").any():
        vol[("input_dist", "all-gather")] = a2a(rw.in_send, rw.in_recv)
        vol[("output_dist", "reduce-scatter")] = float(rw.rw_bytes)
        vol[("grad_dist", "all-gather")] = float(rw.rw_bytes)
    if (kinds == "data_parallel").any():
        vol[("dp_sync", "all-reduce")] = float(dp.dp_grad_bytes)
    if plan.dense == "fully_sharded":
        vol[("param_gather", "all-gather")] = P_dense * float(model.param_bytes)
        vol[("dense_sync", "reduce-scatter")] = P_dense * grad_b
    else:
        vol[("dense_sync", "all-reduce")] = P_dense * grad_b
    return vol


# --------------------------------------------------------------------------------- the oracle

def _phase(c: dict) -> str | None:
    s = scopes(c["op_name"])
    for ph in ("input_dist", "dp_sync", "dense_sync", "loss"):
        if ph in s:
            return ph
    if "output_dist" in s:
        return "grad_dist" if c["backward"] else "output_dist"
    if "param_gather" in s:
        return "dense_sync" if c["backward"] else "param_gather"
    return None


def hlo_volumes(colls: list[dict], D: int) -> dict:
    """Per (phase, kind): the compiled HLO's bytes on the model's terms (see module doc), op count."""
    out = {}
    for c in colls:
        key = (_phase(c) or "other", c["kind"])
        if c["kind"] == "all-to-all":
            v = c["bytes"] * (D - 1) / D
        elif c["kind"] == "all-gather" and key[0] == "input_dist":
            v = c["bytes"] * (D - 1) / D / D          # all-gathered indices vs bucketized (see doc)
        else:
            v = c["buffer_bytes"]
        tot, n, per, dts = out.get(key, (0.0, 0, [], set()))
        out[key] = (tot + v, n + 1, per + [v], dts | {c["dtype"]})
    return out


def check(system_name: str, case: str, *, batch: int | None = None) -> dict:
    """Compile one case and compare; returns a JSON-able dict."""
    import jax
    from . import reference as ref
    from .hardware import load_system
    system = load_system(system_name)
    D = system.num_chips
    if len(jax.devices()) < D:
        raise RuntimeError(f"{system_name} has {D} chips but JAX sees {len(jax.devices())} devices; run "
                           "`python -m perfmodel.oracle` (it forces the host device count before JAX starts)")
    model_of = lambda spec: ref.cost_model(spec)
    spec, plan = parse_case(case, lambda m: ref.load_spec(m, batch=batch), D, system, model_of)
    model = model_of(spec)
    mesh = jax.make_mesh((D,), ("d",), devices=jax.devices()[:D])
    t0 = time.perf_counter()
    step, lay = ref.make_sharded_step(spec, plan, mesh)
    args = ref.abstract_inputs(spec, plan, mesh)
    lowered = jax.jit(step).lower(*args)
    pre = lowered.as_text(dialect="hlo", debug_info=True)
    compiled = lowered.compile()
    post = compiled.as_text()
    compile_s = time.perf_counter() - t0
    ca = compiled.cost_analysis()
    ca = ca[0] if isinstance(ca, (list, tuple)) else ca

    # ---- FLOPs
    b = spec.global_batch / D
    mf = model_flops(model, b)
    dots = hlo_dots(pre)
    layers = [n for n in mf if n != "total"]
    xla = {n: 0.0 for n in layers}
    other = 0.0
    for dt in dots:
        s = scopes(dt["op_name"])
        hit = [n for n in layers if n in s]
        if hit:
            xla[hit[0]] += dt["flops"]
        else:
            other += dt["flops"]
    xla_total = sum(xla.values()) + other
    flops = []
    for n in layers + ["total"]:
        x = xla_total if n == "total" else xla[n]
        m = mf[n]
        flops.append({"layer": n, "xla": x, "model": m["like_for_like"], "model_as_counted": m["counted"],
                      "rel_err": (m["like_for_like"] - x) / x if x else float("nan"),
                      "rel_err_as_counted": (m["counted"] - x) / x if x else float("nan")})
    compiled_flops = float(ca.get("flops", float("nan")))

    # ---- collectives
    colls = hlo_collectives(post, D)
    hv = hlo_volumes(colls, D)
    asked = hlo_volumes(hlo_collectives(pre, D), D)     # the element types the program sends
    mv = model_volumes(system, model, plan)
    comm = []
    for key in sorted(set(hv) | set(mv)):
        if key[0] == "loss":
            continue
        tot, n, per, dts = hv.get(key, (0.0, 0, [], set()))
        pdts = asked.get(key, (0, 0, [], set()))[3]
        note = ""
        if len(dts) == 1 and len(pdts) == 1 and dts != pdts:
            # XLA:CPU reduces and moves bf16 collectives in f32 (float normalization); a GPU backend
            # keeps bf16. The bytes compared are those of the element type the program sends.
            (c_dt,), (p_dt,) = dts, pdts
            f = DTYPE_BYTES.get(p_dt, 4) / DTYPE_BYTES.get(c_dt, 4)
            tot, per = tot * f, [v * f for v in per]
            note = f"compiled for CPU as {c_dt}, sent as {p_dt}"
        # one gradient synchronised as several buffers (one per parameter array): their sum; any
        # other collective is one exchange per op (repeats, if any, are counted in xla_ops)
        x = tot if key[0] in SUMMED_PHASES else (max(per) if per else 0.0)
        m = mv.get(key)
        comm.append({"phase": key[0], "kind": key[1], "xla_bytes": x, "xla_ops": n, "model_bytes": m,
                     "rel_err": ((m - x) / x) if (m is not None and x) else None, "note": note})
    return {"case": case, "system": system_name, "devices": D, "model": spec.name, "global_batch": spec.global_batch,
            "plan": plan.to_dict(), "compile_s": compile_s, "flops": flops, "compiled_cost_analysis_flops": compiled_flops,
            "non_gemm_flops_share": (compiled_flops - xla_total) / compiled_flops if compiled_flops else None,
            "unattributed_dot_flops": other, "collectives": comm,
            "max_rel_err": max([abs(f["rel_err"]) for f in flops] +
                               [abs(c["rel_err"]) for c in comm if c["rel_err"] is not None] + [0.0]),
            "unmatched": [f"{c['phase']}/{c['kind']}" for c in comm if c["rel_err"] is None]}


def run_check(system_name: str, case: str, *, batch: int = 256, max_rows: int = 2000) -> dict:
    """Run the sharded step and the single-device step on a scaled-down copy of the case (rows <=
    max_rows, `batch` samples) from the same parameters and batch; compare the losses and the
    updated parameters. Column-wise shards keep their own row-wise Adagrad state (TorchRec's
    semantics), so a column-wise case is run with SGD on the embeddings."""
    import dataclasses
    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    from . import reference as ref
    from .hardware import load_system
    system = load_system(system_name)
    D = system.num_chips
    spec0, _ = parse_case(case, lambda m: ref.load_spec(m, batch=batch, max_rows=max_rows), D, system,
                          lambda spec: ref.cost_model(spec))
    _, plan = parse_case(case, lambda m: spec0, D, system, lambda spec: ref.cost_model(spec))
    spec = spec0
    if any(t.sharding_type == "column_wise" for t in plan.tables.values()) and spec.emb_optimizer == "rowwise_adagrad":
        spec = dataclasses.replace(spec, emb_optimizer="sgd")
    if plan.a2a_precision != "fp32" or plan.grad_precision != "fp32":
        plan = dataclasses.replace(plan, a2a_precision="fp32", grad_precision="fp32")  # compare exact math
    state = ref.init_state(spec, jax.random.PRNGKey(0))
    batch_ = ref.make_batch(spec, jax.random.PRNGKey(1))
    s1, loss1 = jax.jit(ref.make_step(spec))(state, batch_)
    mesh = jax.make_mesh((D,), ("d",), devices=jax.devices()[:D])
    step, lay = ref.make_sharded_step(spec, plan, mesh)
    specs = ref.state_specs(spec, lay, plan.dense)
    packed = jax.tree_util.tree_map(lambda x, p: jax.device_put(x, NamedSharding(mesh, p)),
                                    ref.pack_state(spec, lay, plan.dense, state), specs)
    bs = NamedSharding(mesh, P("d"))
    s2, loss2 = jax.jit(step)(packed, {k: jax.device_put(v, bs) for k, v in batch_.items()},
                              {k: jax.device_put(v, bs) for k, v in ref.device_maps(lay).items()})
    tables = ref.unpack_tables(spec, lay, s2)
    moved = max(float(np.max(np.abs(np.asarray(a, np.float32) - np.asarray(b, np.float32))))
                for a, b in zip(s1["tables"], state["tables"]))
    t_err = max(float(np.max(np.abs(np.asarray(a, np.float32) - b))) for a, b in zip(s1["tables"], tables))
    dense2 = ref.unpack_dense(spec, plan.dense, s2["dense"], state["dense"])
    d_err = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
                for a, b in zip(jax.tree_util.tree_leaves(s1["dense"]), jax.tree_util.tree_leaves(dense2)))
    return {"case": case, "loss_single": float(loss1), "loss_sharded": float(loss2),
            "table_update_max": moved, "table_max_abs_diff": t_err, "dense_max_abs_diff": d_err,
            "emb_optimizer": spec.emb_optimizer}


def format_result(r: dict) -> str:
    lines = [f"{r['case']} on {r['system']} ({r['devices']} devices, batch {r['global_batch']}), "
             f"compiled in {r['compile_s']:.1f} s"]
    lines.append(f"  {'FLOPs per device':<26} {'XLA':>12} {'model':>12} {'err':>8}   (model as counted: err)")
    for f in r["flops"]:
        lines.append(f"  {f['layer']:<26} {f['xla']:>12.4g} {f['model']:>12.4g} {100 * f['rel_err']:>7.3f}%"
                     f"   ({100 * f['rel_err_as_counted']:+.3f}%)")
    lines.append(f"  {'compiled cost_analysis':<26} {r['compiled_cost_analysis_flops']:>12.4g}   "
                 f"(non-GEMM share {100 * (r['non_gemm_flops_share'] or 0):.2f}%)")
    lines.append(f"  {'collective bytes':<26} {'XLA':>12} {'model':>12} {'err':>8}   ops")
    for c in r["collectives"]:
        m = "-" if c["model_bytes"] is None else f"{c['model_bytes']:.4g}"
        e = "n/a" if c["rel_err"] is None else f"{100 * c['rel_err']:.3f}%"
        lines.append(f"  {c['phase'] + ' ' + c['kind']:<26} {c['xla_bytes']:>12.4g} {m:>12} {e:>8}   {c['xla_ops']}"
                     + (f"   ({c['note']})" if c.get("note") else ""))
    lines.append(f"  max |error| {100 * r['max_rel_err']:.4f}%" +
                 (f"; unmatched: {', '.join(r['unmatched'])}" if r["unmatched"] else ""))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perfmodel.oracle", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--system", default="h100-8", help="system preset whose chip count sets the devices (default h100-8)")
    ap.add_argument("--case", action="append", metavar="MODEL:PLAN[+fsdp][+a2a_bf16][+grad_bf16]",
                    help=f"a model and a plan (one of {', '.join(PLAN_NAMES)}, or a plan JSON); repeatable. "
                         f"Default: {' '.join(DEFAULT_CASES)}")
    ap.add_argument("--batch", type=int, help="override the models' global batch")
    ap.add_argument("--run", action="store_true",
                    help="instead of compiling, run each case's sharded step and the single-device step on a "
                         "scaled-down copy (rows <= 2,000, batch 256) and compare losses and updated parameters")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--out", help="also write the JSON results to this file (never overwrites)")
    args = ap.parse_args(argv)
    from .config import ConfigError, read_file
    from .files import check_output, write_new
    if args.out:
        try:            # before minutes of compiling: the results are written only at the end
            check_output(args.out, (".json",), "results JSON")
        except ConfigError as err:
            print(f"oracle: error: {err}", file=sys.stderr)
            return 2
    m = re.match(r"^.+-(\d+)$", args.system)
    try:      # the chip count, read without JAX (loading a System would start JAX's backend)
        D = int(m.group(1)) if m else int(read_file(args.system).get("sizes", [0])[0])
    except (ConfigError, ValueError, IndexError) as err:
        print(f"oracle: error: {args.system}: give a system <family>-<N> or a system TOML ({err})", file=sys.stderr)
        return 2
    # JAX reads XLA_FLAGS when its backend starts, which importing perfmodel may already have done:
    # run again in a fresh interpreter with D host devices and no combining of collectives (so that
    # each keeps the named scope of its phase; the bytes are the same either way)
    if argv is None and os.environ.get("PERFMODEL_ORACLE_DEVICES") != str(D):
        env = dict(os.environ, PERFMODEL_ORACLE_DEVICES=str(D), JAX_PLATFORMS="cpu",
                   XLA_FLAGS=(f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={D} "
                              "--xla_disable_hlo_passes=cpu-all-reduce-combiner,all-gather-combiner,"
                              "reduce-scatter-combiner,all-reduce-combiner"))
        os.execve(sys.executable, [sys.executable, "-m", "perfmodel.oracle", *sys.argv[1:]], env)
    results = []
    try:
        for case in args.case or DEFAULT_CASES:
            results.append(run_check(args.system, case) if args.run else check(args.system, case, batch=args.batch))
    except ConfigError as err:
        print(f"oracle: error: {err}", file=sys.stderr)
        return 2
    if args.out:
        try:
            write_new(args.out, json.dumps(results, indent=1) + "\n")
        except ConfigError as err:
            print(f"oracle: error: {err}", file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps(results, indent=1))
    elif args.run:
        for r in results:
            print(f"{r['case']}: loss {r['loss_single']:.6f} single, {r['loss_sharded']:.6f} sharded; "
                  f"max |diff| tables {r['table_max_abs_diff']:.2e} (updates up to {r['table_update_max']:.2e}), "
                  f"dense {r['dense_max_abs_diff']:.2e}")
    else:
        print("\n\n".join(format_result(r) for r in results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
