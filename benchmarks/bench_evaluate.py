"""Benchmark of perfmodel's batched evaluation: compile time, plans/s, gradients/s, memory.

    python benchmarks/bench_evaluate.py            # full run (a few minutes on 2 CPU cores)
    python benchmarks/bench_evaluate.py --quick    # smoke run (about a minute)
    python benchmarks/bench_evaluate.py --devices 4

Plan batches are sharded over all JAX devices along a mesh axis 'plans' (DESIGN.md, "Scale beyond one
machine"); on a CPU the host platform is split into --devices devices with
--xla_force_host_platform_device_count, which must be set before jax is imported.
See benchmarks/README.md for what each line means.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import time

DEFAULT_DEVICES = min(os.cpu_count() or 1, 8)


def _parse():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devices", type=int, default=DEFAULT_DEVICES,
                    help=f"host (CPU) devices to force (default: CPU cores, at most 8; here {DEFAULT_DEVICES})")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: one MLPerf batch size, fewer repetitions, no prod-856 gradients")
    a = ap.parse_args()
    if a.devices < 1:
        ap.error("--devices must be at least 1")
    return a


ARGS = _parse() if __name__ == "__main__" else argparse.Namespace(devices=DEFAULT_DEVICES, quick=True)
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + f" --xla_force_host_platform_device_count={ARGS.devices}").strip()

import jax  # noqa: E402  (after XLA_FLAGS)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

import perfmodel as pm  # noqa: E402
from perfmodel.evaluate import evaluate_arrays  # noqa: E402

HARD_TAU = 0.0
RELAXED_TAU = 0.05
TARGET_PLANS_PER_S = 137_000       # dlrm-dcnv2-mlperf on mtia300-64
TARGET_GRADS_PER_S = 30_000        # dlrm-dcnv2-mlperf on mtia300-64, each gradient kind
TARGET_GRAD_COMPILE_S = 15.0       # dlrm-dcnv2-mlperf on mtia300-64: a gradient's first (cold) compile
TARGET_PROD_WALL_S = 1.0           # prod-856 on mtia300-1024: one batched evaluation of 64 plans
TARGET_PROD_BYTES = 4e9            # prod-856 on mtia300-1024: memory, < 4 GB (10^9 bytes)
PROD_BATCH = 64
# The figures before the step model was carved up and sped up (issue 52), for comparison: the
# rates and prod-856's figures are benchmarks/RESULTS.md's full run of 2026-12-06; the gradient
# compile is the same program's at 3d01058 on the same 2-core VM. A reference says what this
# machine did then, not what it does now: rerun the old commit beside this one to compare.
REFERENCE = {"plans": 105_702, "grad_system": 22_877, "grad_plan": 15_716, "grad_compile_s": 21.5,
             "prod_wall_s": 0.102, "prod_xla_gb": 0.25, "prod_rss_gb": 1.0}

RESULTS: list[tuple[str, str, float, str, float | None]] = []   # (what, target, measured, PASS/MISS, reference)


# ------------------------------------------------------------------------------ helpers

def rss_mb() -> float:
    """Peak resident set size of this process so far, MB (10^6 bytes). Linux reports KiB, macOS bytes."""
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / 1e6 if sys.platform == "darwin" else r * 1024 / 1e6


def mem_bytes(compiled) -> tuple[int, int, int] | None:
    """(temp, argument, output) bytes of a compiled executable, per device; None if unavailable."""
    try:
        m = compiled.memory_analysis()
        return int(m.temp_size_in_bytes), int(m.argument_size_in_bytes), int(m.output_size_in_bytes)
    except Exception:  # noqa: BLE001 - not every backend implements it (or returns None)
        return None


def best_time(fn, args, min_reps: int, min_total_s: float, max_reps: int = 50) -> tuple[float, int]:
    """(best wall s, repetitions) of fn(*args), each call waited for with block_until_ready.

    One untimed warm-up call, then at least min_reps timed calls, more (up to max_reps) until
    min_total_s of timed calls have passed: short calls get more tries on a noisy machine.
    """
    jax.block_until_ready(fn(*args))
    best, total, n = float("inf"), 0.0, 0
    while n < min_reps or (total < min_total_s and n < max_reps):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        dt = time.perf_counter() - t
        best, total, n = min(best, dt), total + dt, n + 1
    return best, n


def compile_timed(f, *args):
    """(compiled executable, seconds to lower and compile) of a jitted function."""
    t = time.perf_counter()
    c = f.lower(*args).compile()
    return c, time.perf_counter() - t


def all_finite(tree) -> bool:
    return all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree_util.tree_leaves(tree))


def relax(pa: pm.PlanArrays) -> pm.PlanArrays:
    """A relaxed plan: each one-hot choice / placement mixed 90/10 with the uniform distribution."""
    mix = lambda x: 0.9 * x + 0.1 / x.shape[-1]
    return pm.PlanArrays(
        shard_type=mix(pa.shard_type), placement=mix(pa.placement), domain_placement=mix(pa.domain_placement),
        cw_shards=pa.cw_shards, cache_ratio=pa.cache_ratio, dense_mode=mix(pa.dense_mode),
        algorithm=pa.algorithm, a2a_precision=mix(pa.a2a_precision), grad_precision=mix(pa.grad_precision),
        offload=0.9 * pa.offload + 0.05, pipeline=0.9 * pa.pipeline + 0.05,
        grad_buckets=pa.grad_buckets, overlap_chunks=pa.overlap_chunks)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def row(label: str, batch: int, compile_s: float, wall_s: float, reps: int, unit: str, note: str = "") -> None:
    print(f"  {label:<34} batch {batch:>5}  compile {compile_s:6.2f} s  best {wall_s * 1e3:8.2f} ms"
          f" (of {reps:>2})  {batch / wall_s:>10,.0f} {unit}{note}")


# ------------------------------------------------------------------------------ one system x model

KINDS = (("hard", "hard eval (tau 0)", "plans/s"),
         ("grad_system", "grad wrt System (tau 0)", "grads/s"),
         ("grad_plan", f"grad wrt relaxed plan (tau {RELAXED_TAU})", "grads/s"))


class Case:
    """A system and a model, their jitted batched functions, and plan batches sharded over the mesh."""

    def __init__(self, system_name: str, model_name: str, mesh: Mesh, min_reps: int, min_total_s: float):
        self.system_name, self.model_name, self.mesh = system_name, model_name, mesh
        self.min_reps, self.min_total_s = min_reps, min_total_s
        s = self.system = pm.load_system(system_name)
        m = self.model = pm.load_model(model_name)
        self.n_dev = mesh.devices.size
        self.sys_repl = jax.device_put(s, NamedSharding(mesh, PartitionSpec()))
        hard_of_system = lambda sy, p: evaluate_arrays(sy, m, p, HARD_TAU).step_s
        # A plan search holds the system fixed: the hard evaluation and the plan gradient close over it.
        # The System gradient takes it as an argument (in_axes None: one System, a batch of plans).
        self.single = jax.jit(lambda p: evaluate_arrays(s, m, p, HARD_TAU).step_s)
        self.fns = {
            "hard": jax.jit(jax.vmap(lambda p: evaluate_arrays(s, m, p, HARD_TAU).step_s)),
            "grad_system": jax.jit(jax.vmap(jax.grad(hard_of_system, argnums=0), in_axes=(None, 0))),
            "grad_plan": jax.jit(jax.vmap(jax.grad(lambda p: evaluate_arrays(s, m, p, RELAXED_TAU).step_s))),
        }

    def plans(self, n: int, relaxed: bool = False):
        """n random one-hot plans (PRNGKey(0)); optionally relaxed; leading axis sharded over 'plans'."""
        pa = pm.random_plans(jax.random.PRNGKey(0), self.system, self.model, n)
        if relaxed:
            pa = relax(pa)
        return jax.device_put(pa, NamedSharding(self.mesh, PartitionSpec("plans")))

    def header(self) -> None:
        print(f"\n== {self.model_name} on {self.system_name}: {self.model.tables.count} tables, "
              f"{self.system.num_chips} chips, scale-up domain {self.system.domain_size} ==")

    def measure(self, kind: str, n: int):
        """Compile and time one batched function on n plans; print its row. Returns a dict of figures."""
        pa = self.plans(n, relaxed=(kind == "grad_plan"))
        args = (self.sys_repl, pa) if kind == "grad_system" else (pa,)
        c, ct = compile_timed(self.fns[kind], *args)
        wall, reps = best_time(c, args, self.min_reps, self.min_total_s)
        out = c(*args)
        label, unit = next((lab, u) for k, lab, u in KINDS if k == kind)
        row(label, n, ct, wall, reps, unit, "" if all_finite(out) else "  NON-FINITE OUTPUT")
        return {"n": n, "compile_s": ct, "wall_s": wall, "rate": n / wall, "compiled": c, "plans": pa, "out": out}

    def loop_baseline(self, hard: dict, n: int, batched: dict | None = None) -> None:
        """The first n plans of a measured hard batch, one at a time through the jitted single-plan
        function in a Python loop (each call waited for), against a batched rate (default: that batch's)."""
        batched = batched or hard
        n = min(n, hard["n"])
        host = jax.device_get(hard["plans"])
        items = [jax.device_put(jax.tree_util.tree_map(lambda x, i=i: x[i], host)) for i in range(n)]
        jax.block_until_ready(items)
        c, ct = compile_timed(self.single, items[0])
        jax.block_until_ready(c(items[0]))
        t = time.perf_counter()
        outs = [jax.block_until_ready(c(p)) for p in items]
        wall = time.perf_counter() - t
        ref = np.asarray(hard["out"])[:n]
        err = float(np.max(np.abs(np.asarray(outs) - ref) / np.abs(ref)))
        rate = n / wall
        print(f"  {'loop baseline: 1 plan per call':<34} plans {n:>5}  compile {ct:6.2f} s  total {wall * 1e3:8.2f} ms"
              f"        {rate:>10,.0f} plans/s")
        print(f"  {'batched / loop speed':<34} {batched['rate'] / rate:,.1f}x  (batched: {batched['rate']:,.0f} "
              f"plans/s at batch {batched['n']}; loop vs batched step_s on the same plans: max rel diff {err:.1e})")


# ------------------------------------------------------------------------------ the two cases

def bench_prod(mesh: Mesh, quick: bool, min_reps: int, min_total_s: float, loop_n: int) -> None:
    case = Case("mtia300-1024", "prod-856", mesh, min_reps, min_total_s)
    case.header()
    rss_before = rss_mb()
    hard = case.measure("hard", PROD_BATCH)
    rss_after = rss_mb()
    wall = hard["wall_s"]
    print(f"  -> one batched evaluation of {PROD_BATCH} plans after compile: {wall:.3f} s (best); "
          f"compile {hard['compile_s']:.2f} s")
    RESULTS.append((f"prod-856 / mtia300-1024: one batched evaluation of {PROD_BATCH} plans, s",
                    f"< {TARGET_PROD_WALL_S:g} s", wall, verdict(wall < TARGET_PROD_WALL_S), REFERENCE["prod_wall_s"]))
    mem = mem_bytes(hard["compiled"])
    if mem is not None:
        tmp, arg, out = mem
        per_dev = tmp + arg + out
        total = per_dev * case.n_dev
        print(f"  -> XLA memory analysis per device: temp {tmp / 1e6:.1f} MB + arguments {arg / 1e6:.1f} MB + "
              f"output {out / 1e3:.1f} kB = {per_dev / 1e6:.1f} MB; all {case.n_dev} devices {total / 1e6:.1f} MB")
        RESULTS.append(("prod-856 / mtia300-1024: XLA temp+argument+output bytes, all devices, GB",
                        f"< {TARGET_PROD_BYTES / 1e9:g} GB", total / 1e9, verdict(total < TARGET_PROD_BYTES),
                        REFERENCE["prod_xla_gb"]))
    else:
        print("  -> XLA memory analysis: not available on this backend")
    print(f"  -> peak RSS of the process: {rss_before:.0f} MB before this case, {rss_after:.0f} MB after its "
          f"{PROD_BATCH}-plan evaluation (process peak: runtime, plan generation, compile and runs)")
    RESULTS.append(("prod-856 / mtia300-1024: process peak RSS after that evaluation, GB",
                    f"< {TARGET_PROD_BYTES / 1e9:g} GB", rss_after / 1e3, verdict(rss_after * 1e6 < TARGET_PROD_BYTES),
                    REFERENCE["prod_rss_gb"]))
    if quick:
        print("  gradients: skipped (--quick)")
    else:
        case.measure("grad_system", PROD_BATCH)
        case.measure("grad_plan", PROD_BATCH)
    case.loop_baseline(hard, loop_n)


def bench_mlperf(mesh: Mesh, batches: list[int], min_reps: int, min_total_s: float, loop_n: int) -> None:
    case = Case("mtia300-64", "dlrm-dcnv2-mlperf", mesh, min_reps, min_total_s)
    case.header()
    best, first, first_hard = {}, {}, None
    for kind, label, unit in KINDS:
        for n in batches:
            r = case.measure(kind, n)
            first.setdefault(kind, r)          # the first compile of the kind in this process: cold
            if kind == "hard" and first_hard is None:
                first_hard = r
            if kind not in best or r["rate"] > best[kind]["rate"]:
                best[kind] = r
        b = best[kind]
        print(f"  -> best {label}: {b['rate']:,.0f} {unit} at batch {b['n']} (compile {b['compile_s']:.2f} s)")
    h = best["hard"]
    case.loop_baseline(first_hard, loop_n, h)
    RESULTS.append(("dlrm-dcnv2-mlperf / mtia300-64: hard plan evaluations/s", f">= {TARGET_PLANS_PER_S:,}",
                    h["rate"], verdict(h["rate"] >= TARGET_PLANS_PER_S), REFERENCE["plans"]))
    for kind, what in (("grad_system", "gradients/s wrt System (every hardware leaf)"),
                       ("grad_plan", f"gradients/s wrt relaxed plan arrays (tau {RELAXED_TAU})")):
        RESULTS.append((f"dlrm-dcnv2-mlperf / mtia300-64: {what}", f">= {TARGET_GRADS_PER_S:,}",
                        best[kind]["rate"], verdict(best[kind]["rate"] >= TARGET_GRADS_PER_S), REFERENCE[kind]))
    cold = max(first["grad_system"]["compile_s"], first["grad_plan"]["compile_s"])
    RESULTS.append((f"dlrm-dcnv2-mlperf / mtia300-64: gradient cold compile (slower kind, batch {batches[0]}), s",
                    f"<= {TARGET_GRAD_COMPILE_S:g} s", cold, verdict(cold <= TARGET_GRAD_COMPILE_S),
                    REFERENCE["grad_compile_s"]))


def main() -> None:
    t0 = time.perf_counter()
    devices = jax.devices()
    n_dev = len(devices)
    mesh = Mesh(np.asarray(devices), ("plans",))
    quick = ARGS.quick
    min_reps, min_total_s = (3, 0.2) if quick else (5, 1.0)
    batches = [1024] if quick else [1024, 4096, 8192]
    batches = sorted({max(n_dev, n // n_dev * n_dev) for n in batches})    # divisible by the device count
    if PROD_BATCH % n_dev:
        sys.exit(f"the prod-856 batch of {PROD_BATCH} plans does not split over {n_dev} devices; "
                 "choose --devices dividing 64")

    load = " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    print(f"perfmodel evaluate benchmark ({'--quick' if quick else 'full'} run)")
    print(f"  jax {jax.__version__}, backend {jax.default_backend()}, {n_dev} JAX device(s) "
          f"[{devices[0].device_kind}], {os.cpu_count()} CPU cores, python {platform.python_version()}, "
          f"load average {load}")
    print(f"  plan batches sharded over mesh axis 'plans' ({n_dev}-way NamedSharding); random plans from "
          f"PRNGKey(0); best of >= {min_reps} timed calls (more until {min_total_s:g} s, at most 50) after one "
          f"warm-up call; wall clock, block_until_ready; compile = lower + compile")

    # prod-856 first, so that the process peak RSS reported for it is not the MLPerf batches'
    bench_prod(mesh, quick, min_reps, min_total_s, 16 if quick else PROD_BATCH)
    bench_mlperf(mesh, batches, min_reps, min_total_s, 50 if quick else 200)

    print("\n== targets (reference: the figures before issue 52, REFERENCE) ==")
    shown = lambda x: "n/a" if x is None else f"{x:,.0f}" if x >= 1000 else f"{x:.3f}"
    for what, target, measured, v, ref in RESULTS:
        print(f"  {v}  {what:<88} measured {shown(measured):>9}   target {target:<12} reference {shown(ref):>9}")
    print(f"\n  process peak RSS at the end: {rss_mb():.0f} MB; total benchmark wall time "
          f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
