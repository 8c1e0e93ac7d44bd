"""Per-step costs that do not shrink with a faster chip: the kernels a step launches beyond those the
other cost terms already price, the hand-offs between the compute and communication streams, and
the host's fixed work per step.

A faster chip shortens every kernel's work but not the fixed time each kernel costs to launch and
start, nor the host's turn between two steps. On 4 x H100 the three MLPerf DLRM-DCNv2 runs
(data/measurements/steps) extrapolate to about 0.86 ms per step at zero batch; the terms below are
what a step of that model does at every batch (docs/design.md, "Per-step overheads").

    overhead = t_launch (n_kernels + n_handoffs) + t_host

t_launch   chip.launch_s, the chip's fixed cost of one kernel launch (compute.launch_overhead_us):
           the same constant every GEMM, embedding kernel and optimizer pass already pays; a
           graph-replayed step (HugeCTR runs its step as CUDA graphs) still pays it per node, as the
           GPU's front end starts each dependent kernel only when its predecessor ends
t_host     chip.host_step_s (host.step_overhead_us): the host's fixed work between two steps that
           the device waits for: the step's closing synchronization and the launch of the next
           step's graph (10-30 us on bare metal, 0.53 ms in a virtual machine: a public
           reproduction's profile of HugeCTR DLRM-DCNv2 on 8 x B200, docs/design.md)

n_kernels, per device, counts only kernels no other term prices (the GEMMs pay t_launch in
compute.gemm_parts, the embedding lookup and its fused backward + update one each in
cost/embedding.py, the dense optimizer one in cost/schedule.py, each collective its call cost in
cost/collectives):

  dense       G_e (DENSE_FWD + DENSE_BWD): one elementwise kernel after each GEMM with elementwise
              traffic (bias and activation, the cross layer's product and residual) and one for its
              gradient in the backward (G_e of the model's G GEMMs have such traffic)
  step        STEP_KERNELS: kernels every step runs once whatever the plan (the dense input's cast,
              the interaction's concat and its split in the backward, the loss forward and backward,
              the cast of the updated dense weights to the compute precision)
  embeddings  per embedding group (each sharding type the plan uses: frameworks fuse the tables
              of one sharding type into one group, so a table of a type already in use adds no
              kernels), with u_k = 1 - prod_t (1 - s_tk) the probability that type k is used:
                  sum_k u_k (KEY_PREP + log2(R_max) / RADIX_BITS + GROUP_KERNELS) - 2
              key preparation: a radix sort of the group's ids (one histogram kernel, counted in
              KEY_PREP, and one pass per RADIX_BITS-bit digit of the largest table's row index,
              R_max rows), label-and-count of the sorted ids (flag run heads, count) and the swizzle
              that orders them by destination: the sort, count and swizzle kernels of the trace;
              GROUP_KERNELS: forward lookup + pooling, the cast of its output, the all-to-all's
              packing; backward unpacking, the reduction of duplicate ids' gradients, the optimizer
              update (also the one over data-parallel tables: their update's traffic is
              embedding.py's dp_bwd, only its launch is new here). The 2 are the two launches
              embedding.py already charges. The key preparation's memory traffic is
              embedding.py's `sort` term; these are its launches only, which do not shrink with
              the batch or the chip
n_handoffs, per collective call, 2 (D > 1 only): the communication stream waits for the event that
  marks its input ready, and the compute stream for the one that marks its output ready; a kernel
  behind a cross-stream wait starts a launch after the event (the collective's own cost per call,
  chip.core_call_s, is NCCL's enqueue, priced in cost/collectives). The calls: the input
  all-to-all (its pipelined share p runs during the previous step's compute and hands off there:
  1 - p of it), the output and gradient all-to-alls, the row-wise and table-row-wise
  reduce-scatters and all-gathers, the all-reduce of data-parallel tables, and of the dense
  gradients the first bucket's and the last one's hand-offs (the buckets between them hand off
  while the backward still runs: hidden), plus the parameter all-gathers of a sharded dense part.

The overhead runs on the compute stream after the optimizer: the host's turn happens between two
steps, and the launches and hand-offs of a step whose kernels run one after another on the
critical path add to it wherever they fall. It counts in the compute stream's busy time (the device
waits for the host; a kernel's launch holds its stream) but not in the communication stream's: a
step bound by its communication total already overlaps the compute stream's work.

Every count is a smooth function of the plan's arrays (a relaxed plan's probabilities in, a
fractional count out): the same code runs on numpy batches and jax tracers (cost.arrays).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

from ..hardware import System
from ..pytree import pytree
from ..plan import PlanArrays
from ..workload import RankingModel
from .arrays import xp_of

# Kernels per step of a HugeCTR-style DLRM step: assumed from the kernel categories of a public
# profile of HugeCTR DLRM-DCNv2 on 8 x B200 (docs/design.md, "Per-step overheads"); each count is the
# fewest kernels that do what that profile names, no kernel is counted twice with another term.
DENSE_FWD = 1.0        # elementwise kernels after a GEMM with elementwise traffic, forward
DENSE_BWD = 1.0        # and its gradient's, backward
STEP_KERNELS = 6.0     # dense input cast, interaction concat + split, loss fwd + bwd, weight cast
KEY_PREP = 4.0         # radix sort histogram, label-and-count (flag run heads, count), swizzle
RADIX_BITS = 8.0       # bits a radix-sort pass sorts (cub's onesweep: 8-bit digits)
GROUP_KERNELS = 6.0    # lookup + pool, output cast, a2a pack; a2a unpack, duplicate reduce, update
CHARGED_EMB = 2.0      # launches cost/embedding.py already charges (forward, backward)
HANDOFFS_PER_CALL = 2.0


@pytree
@dataclass(frozen=True)
class Overheads:
    kernels: jnp.ndarray        # kernels per step no other term prices (per plan)
    handoffs: jnp.ndarray       # cross-stream waits per step (per plan)
    launch_s: jnp.ndarray       # t_launch (kernels + handoffs)
    host_s: jnp.ndarray         # the host's fixed work per step
    total_s: jnp.ndarray        # launch_s + host_s


def used_types(pa: PlanArrays):
    """[..., 5]: per sharding type, the probability that some table uses it, 1 - prod_t (1 - s_tk)."""
    xp = xp_of(pa.shard_type)
    return 1.0 - xp.prod(1.0 - pa.shard_type, axis=-2)


def kernel_count(model: RankingModel, pa: PlanArrays):
    """Kernels per step (per device) that no other cost term prices (module docstring)."""
    d = model.dense
    xp = xp_of(pa.shard_type, model.tables.rows)
    # GEMMs followed by elementwise kernels, counted in float32 (an integer count promotes a numpy batch to float64)
    g_elem = xp.sum((xp.asarray(d.elementwise) > 0.0).astype(np.float32))
    dense = g_elem * (DENSE_FWD + DENSE_BWD)
    r_max = xp.max(xp.asarray(model.tables.rows, np.float32))
    passes = xp.log2(xp.maximum(r_max, 2.0)) / RADIX_BITS
    groups = xp.sum(used_types(pa), axis=-1)                  # >= 1 whenever the model has a table
    # a model without tables uses no group and charges no launch there: never below zero
    emb = xp.maximum(groups * (KEY_PREP + passes + GROUP_KERNELS) - CHARGED_EMB, 0.0)
    return dense + STEP_KERNELS + emb


def handoff_count(num_chips: int, calls):
    """Cross-stream waits per step for `calls` collective calls on the critical path (none on one chip)."""
    return HANDOFFS_PER_CALL * calls * (num_chips > 1)


def step_overheads(system: System, model: RankingModel, pa: PlanArrays, calls) -> Overheads:
    """The per-step overheads of one plan (jax) or a batch of plans (numpy; every output then has
    the batch axis). `calls`: the collective calls a step makes whose hand-offs are exposed, as
    cost/schedule.py's exposed_calls counts them (module docstring)."""
    chip = system.chip
    kernels = kernel_count(model, pa)
    handoffs = handoff_count(system.num_chips, calls)
    launch = chip.launch_s * (kernels + handoffs)
    host = chip.host_step_s + 0.0 * launch
    return Overheads(kernels, handoffs, launch, host, launch + host)
