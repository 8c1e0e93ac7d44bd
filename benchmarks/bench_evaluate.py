"""Benchmark of perfmodel's batched evaluation: compile time, plans/s, gradients/s, memory.

    python benchmarks/bench_evaluate.py            # full run (a few minutes on 2 CPU cores)
    python benchmarks/bench_evaluate.py --quick    # smoke run (under about a minute)
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


def _parse():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devices", type=int, default=min(os.cpu_count() or 1, 8),
                    help="host (CPU) devices to force; default: CPU cores, at most 8")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: one MLPerf batch size, fewer repetitions, no prod-856 gradients")
    return ap.parse_args()


ARGS = _parse() if __name__ == "__main__" else argparse.Namespace(devices=min(os.cpu_count() or 1, 8), quick=True)
_flag = f"--xla_force_host_platform_device_count={ARGS.devices}"
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _flag).strip()

import jax  # noqa: E402  (after XLA_FLAGS)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

import perfmodel as pm  # noqa: E402
from perfmodel.evaluate import _evaluate  # noqa: E402

HARD_TAU = 0.0
RELAXED_TAU = 0.05
TARGET_PLANS_PER_S = 100_000       # dlrm-dcnv2-mlperf on mtia300-64
TARGET_GRADS_PER_S = 10_000        # dlrm-dcnv2-mlperf on mtia300-64
TARGET_PROD_WALL_S = 1.0           # prod-856 on mtia300-1024, one batch of 64 plans
TARGET_PROD_BYTES = 4e9            # prod-856 on mtia300-1024, < 4 GB
PROD_BATCH = 64

RESULTS: list[tuple[str, str, float, str]] = []   # (what, target text, measured, PASS/MISS)


# ------------------------------------------------------------------------------ helpers

def rss_mb() -> float:
    """Peak resident set size of this process so far, MB (10^6 bytes). Linux reports KiB, macOS bytes."""
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / 1e6 if sys.platform == "darwin" else r * 1024 / 1e6


def mem_bytes(compiled) -> tuple[int, int, int] | None:
    """(temp, argument, output) bytes of a compiled executable, per device; None if unavailable."""
    try:
        m = compiled.memory_analysis()
    except Exception:  # noqa: BLE001 - not every backend implements it
        return None
    if m is None:
        return None
    try:
        return int(m.temp_size_in_bytes), int(m.argument_size_in_bytes), int(m.output_size_in_bytes)
    except AttributeError:
        return None


def best_time(fn, args, reps: int) -> float:
    """Best wall time (s) of fn(*args) over reps calls, each waited for with block_until_ready."""
    jax.block_until_ready(fn(*args))                     # warm-up (first call after compile)
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - t)
    return best


def compile_timed(f, *args):
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


def row(kind: str, batch: int, compile_s: float, wall_s: float, unit: str, extra: str = "") -> None:
    print(f"  {kind:<34} batch {batch:>6}  compile {compile_s:7.2f} s  best {wall_s * 1e3:9.2f} ms"
          f"  {batch / wall_s:>12,.0f} {unit}{extra}")


# ------------------------------------------------------------------------------ the functions

def make_functions(model):
    hard = lambda s, p: _evaluate(s, model, p, HARD_TAU).step_s
    relaxed = lambda s, p: _evaluate(s, model, p, RELAXED_TAU).step_s
    return {
        "hard": jax.jit(jax.vmap(hard, in_axes=(None, 0))),
        # d step_s / d every hardware leaf of the System, per plan (hard max, one-hot plans)
        "grad_system": jax.jit(jax.vmap(jax.grad(hard, argnums=0), in_axes=(None, 0))),
        # d step_s / d every plan-array leaf, relaxed plan, smooth max
        "grad_plan": jax.jit(jax.vmap(jax.grad(relaxed, argnums=1), in_axes=(None, 0))),
        "single": jax.jit(hard),
    }


class Case:
    def __init__(self, system_name: str, model_name: str, mesh: Mesh):
        self.system_name, self.model_name, self.mesh = system_name, model_name, mesh
        self.system = pm.load_system(system_name)
        self.model = pm.load_model(model_name)
        self.fns = make_functions(self.model)
        self.sys_repl = jax.device_put(self.system, NamedSharding(mesh, PartitionSpec()))
        self.n_dev = mesh.devices.size

    def plans(self, n: int, relaxed: bool = False):
        """n random plans (seed 0), leading axis sharded over the 'plans' mesh axis."""
        pa = pm.random_plans(jax.random.PRNGKey(0), self.system, self.model, n)
        if relaxed:
            pa = relax(pa)
        return jax.device_put(pa, NamedSharding(self.mesh, PartitionSpec("plans")))

    def header(self) -> None:
        print(f"\n== {self.model_name} on {self.system_name}: {self.model.tables.count} tables, "
              f"{self.system.num_chips} chips, scale-up domain {self.system.domain_size} ==")

    def measure(self, kind: str, n: int, reps: int):
        """(compile s, best wall s, compiled, output) of a batched function on n plans."""
        pa = self.plans(n, relaxed=(kind == "grad_plan"))
        c, ct = compile_timed(self.fns[kind], self.sys_repl, pa)
        wall = best_time(c, (self.sys_repl, pa), reps)
        return ct, wall, c, c(self.sys_repl, pa)

    def loop_baseline(self, n: int, batched_wall_per_plan: float) -> None:
        """The same plans one at a time through the jitted single-plan function, in a Python loop."""
        pa = pm.random_plans(jax.random.PRNGKey(0), self.system, self.model, n)
        items = [jax.tree_util.tree_map(lambda x, i=i: x[i], pa) for i in range(n)]
        jax.block_until_ready(items)
        single = self.fns["single"]
        c, ct = compile_timed(single, self.system, items[0])
        jax.block_until_ready(c(self.system, items[0]))
        t = time.perf_counter()
        outs = [jax.block_until_ready(c(self.system, p)) for p in items]
        wall = time.perf_counter() - t
        batched = np.asarray(self.fns["hard"](self.sys_repl, self.plans(n)))
        loop = np.asarray(outs)
        err = float(np.max(np.abs(loop - batched) / np.abs(batched)))
        rate = n / wall
        print(f"  {'baseline: Python loop, 1 plan/call':<34} plans  {n:>6}  compile {ct:7.2f} s  "
              f"total {wall * 1e3:9.2f} ms  {rate:>12,.0f} plans/s  (each call block_until_ready)")
        print(f"  {'batched / loop speed':<34} {1.0 / batched_wall_per_plan / rate:,.1f}x"
              f"   (loop vs batched step_s: max rel diff {err:.1e})")


# ------------------------------------------------------------------------------ the cases

def bench_prod(mesh: Mesh, quick: bool, reps: int, loop_n: int) -> None:
    case = Case("mtia300-1024", "prod-856", mesh)
    case.header()
    rss_before = rss_mb()
    ct, wall, c, out = case.measure("hard", PROD_BATCH, reps)
    rss_after = rss_mb()
    hard_wall = wall
    row("hard eval (tau 0)", PROD_BATCH, ct, wall, "plans/s")
    print(f"  one batched evaluation of {PROD_BATCH} plans after compile: {wall:.3f} s "
          f"(best of {reps}; all finite: {'yes' if all_finite(out) else 'NO'})")
    RESULTS.append((f"prod-856 / mtia300-1024: wall of one batch of {PROD_BATCH} plans (s)",
                    f"< {TARGET_PROD_WALL_S:g} s", wall, verdict(wall < TARGET_PROD_WALL_S)))
    mem = mem_bytes(c)
    if mem is not None:
        tmp, arg, outb = mem
        per_dev = tmp + arg + outb
        total = per_dev * case.n_dev
        print(f"  XLA memory analysis, per device: temp {tmp / 1e6:.1f} MB + arguments {arg / 1e6:.1f} MB + "
              f"output {outb / 1e6:.3f} MB = {per_dev / 1e6:.1f} MB; x {case.n_dev} devices = {total / 1e6:.1f} MB")
        RESULTS.append((f"prod-856 / mtia300-1024: XLA temp+arg+out, all {case.n_dev} devices (GB)",
                        f"< {TARGET_PROD_BYTES / 1e9:g} GB", total / 1e9, verdict(total < TARGET_PROD_BYTES)))
    else:
        print("  XLA memory analysis: not available on this backend")
    print(f"  peak RSS of the process: {rss_before:.0f} MB before this case, {rss_after:.0f} MB after the "
          f"{PROD_BATCH}-plan evaluation (process peak: imports, plan generation, compile and run)")
    RESULTS.append(("prod-856 / mtia300-1024: process peak RSS after the eval (GB)",
                    f"< {TARGET_PROD_BYTES / 1e9:g} GB", rss_after / 1e3, verdict(rss_after * 1e6 < TARGET_PROD_BYTES)))
    if quick:
        print("  gradients: skipped (--quick)")
    else:
        for kind, label in (("grad_system", "grad wrt System (tau 0)"),
                            ("grad_plan", f"grad wrt relaxed plan (tau {RELAXED_TAU})")):
            ct, gwall, c, out = case.measure(kind, PROD_BATCH, reps)
            row(label, PROD_BATCH, ct, gwall, "grads/s", "" if all_finite(out) else "  NON-FINITE OUTPUT")
    case.loop_baseline(loop_n, hard_wall / PROD_BATCH)


def bench_mlperf(mesh: Mesh, batches: list[int], reps: int, loop_n: int) -> None:
    case = Case("mtia300-64", "dlrm-dcnv2-mlperf", mesh)
    case.header()
    best = {}
    for kind, label, unit in (("hard", "hard eval (tau 0)", "plans/s"),
                              ("grad_system", "grad wrt System (tau 0)", "grads/s"),
                              ("grad_plan", f"grad wrt relaxed plan (tau {RELAXED_TAU})", "grads/s")):
        for n in batches:
            ct, wall, c, out = case.measure(kind, n, reps)
            fin = all_finite(out)
            row(label, n, ct, wall, unit, "" if fin else "  NON-FINITE OUTPUT")
            if kind not in best or n / wall > best[kind][1] / best[kind][2]:
                best[kind] = (n, n, wall)
        n, _, wall = best[kind]
        print(f"  -> best {label}: {n / wall:,.0f} {unit} at batch {n}")
    hard_n, _, hard_wall = best["hard"]
    case.loop_baseline(loop_n, hard_wall / hard_n)
    RESULTS.append(("dlrm-dcnv2-mlperf / mtia300-64: hard plan evaluations/s",
                    f">= {TARGET_PLANS_PER_S:,}", hard_n / hard_wall, verdict(hard_n / hard_wall >= TARGET_PLANS_PER_S)))
    for kind, what in (("grad_system", "gradients/s wrt System"),
                       ("grad_plan", "gradients/s wrt relaxed plan")):
        n, _, wall = best[kind]
        RESULTS.append((f"dlrm-dcnv2-mlperf / mtia300-64: {what}", f">= {TARGET_GRADS_PER_S:,}", n / wall,
                        verdict(n / wall >= TARGET_GRADS_PER_S)))


def main() -> None:
    t0 = time.perf_counter()
    devices = jax.devices()
    n_dev = len(devices)
    mesh = Mesh(np.asarray(devices), ("plans",))
    quick = ARGS.quick
    reps = 3 if quick else 5
    step = n_dev
    batches = [1024] if quick else [1024, 4096, 8192]
    batches = [max(step, n // step * step) for n in batches]    # divisible by the device count
    loop_n = 50 if quick else 200

    print(f"perfmodel evaluate benchmark ({'quick' if quick else 'full'} run)")
    print(f"  jax {jax.__version__}, backend {jax.default_backend()}, {n_dev} device(s) "
          f"[{devices[0].device_kind}], {os.cpu_count()} CPU cores, python {platform.python_version()}")
    print(f"  plan batches sharded over mesh axis 'plans' ({n_dev} way); seed PRNGKey(0); "
          f"best of {reps} repetitions after one warm-up call; times are wall clock")

    # prod-856 first, so that the process peak RSS it reports is not the MLPerf batches'
    bench_prod(mesh, quick, reps, 16 if quick else PROD_BATCH)
    bench_mlperf(mesh, batches, reps, loop_n)

    print("\n== targets ==")
    for what, target, measured, v in RESULTS:
        shown = f"{measured:,.0f}" if measured >= 1000 else f"{measured:.3f}"
        print(f"  {v}  {what:<72} measured {shown:>10}   target {target}")
    print(f"\n  process peak RSS at the end: {rss_mb():.0f} MB;  total benchmark wall time "
          f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
