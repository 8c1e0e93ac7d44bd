"""Memory per device: embedding shards, dense state, activations, communication buffers.

dense state   P_dense (param_bytes x 2 [weights + grads] + 4 x optimizer values) / shard,
              shard = 1 (replicated), D (fully sharded), L (hybrid: sharded inside the domain)
activations   b (sum_g m n + elementwise / 2) x activation_bytes   saved for the backward pass
              + b x pooled embedding width x 4 B x 2                 pooled outputs and their grads
buffers       the all-to-all send and receive buffers, and one gradient bucket
"""

from __future__ import annotations

from ..workload import RankingModel


def dense_shards(pa, num_chips: int, domain_size: int):
    """The devices the dense state is split over: 1 (replicated), D (fully sharded), L (hybrid),
    weighted by the plan's dense mode."""
    m_rep, m_fsdp, m_hyb = pa.dense_mode[..., 0], pa.dense_mode[..., 1], pa.dense_mode[..., 2]
    return m_rep * 1.0 + m_fsdp * num_chips + m_hyb * domain_size


def dense_state_bytes(model: RankingModel, shard):
    return model.dense.params() * (2.0 * model.param_bytes + 4.0 * model.dense_opt_values) / shard


def activation_bytes(model: RankingModel, local_batch, pooled_per_sample):
    d = model.dense
    saved = (d.m * d.n + 0.5 * d.elementwise).sum() * model.activation_bytes
    return local_batch * (saved + pooled_per_sample * 4.0 * 2.0)
