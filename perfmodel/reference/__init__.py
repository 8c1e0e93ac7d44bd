"""A reference JAX DLRM training step, built from the same model config the cost model reads.

What one step does (TorchRec's DLRM, the semantics the cost model assumes):

  embedding bags   pooled_t[s] = sum_{j < P_t} W_t[idx_t[s, j]]   (a gather + a segment sum)
  bottom MLP       ReLU layers on the dense features, ending at the embedding dim d
  interaction      dot:   Z = X X^T over the F = T + 1 vectors of a sample, strict lower triangle,
                          concatenated with the bottom output (the backward is one GEMM,
                          dX = (dZ + dZ^T) X, the single dX the cost model counts)
                   dcnv2: x_{l+1} = x0 * (V_l (U_l x_l) + b_l) + x_l   (low-rank cross, Wang et al. 2021)
  top MLP          ReLU layers, the last one linear; loss = mean binary cross-entropy with logits
  optimizers       embeddings: row-wise Adagrad (one accumulator per row, fused sparse update of
                   the distinct rows touched), or SGD / lazy Adam; dense: SGD, Adagrad or Adam (optax)

`make_step(spec)` is the plain single-device step. `make_sharded_step(spec, plan, mesh)` runs the
same math over a 1-D mesh with `jax.shard_map`, placing every table as a perfmodel Plan says:

  table_wise / column_wise   indices all-to-all to the shard holders ("input_dist"), local lookups,
                             pooled vectors all-to-all back to the sample owners ("output_dist");
                             the backward is the transposed all-to-all ("grad_dist")
  row_wise                   indices all-gathered (static shapes cannot bucketize by owner), masked
                             local lookups, partial sums reduce-scattered over the batch; the
                             backward is the transposed all-gather
  data_parallel              local lookups on a replica, the dense table gradient all-reduced ("dp_sync")
  dense replicated           gradients all-reduced ("dense_sync");  fully_sharded: the flat parameter
                             vector is all-gathered ("param_gather") and its gradient reduce-scattered

SPMD needs one shape on every device, so uneven placements are padded to the largest device:
this is exactly the slowest device the cost model's all-to-all time is set by.
"""

from .spec import INDEX_DTYPE, INDEX_BYTES, DTYPES, ELEMENT_DTYPES, SUPPORTED_TYPES, Layer, Spec, load_spec, spec_from_dict, model_dict, cost_model  # noqa: F401
from .step import init_dense, init_tables, init_emb_state, dense_optimizer, make_batch, index_columns, embedding_bag, gram, dense_forward, bce_sum, sparse_update, dense_table_update, init_state, make_step, make_timed_step  # noqa: F401
from .sharded import Layout, make_layout, pack_state, unpack_tables, unpack_dense, make_sharded_step, state_specs, device_maps, abstract_inputs  # noqa: F401
