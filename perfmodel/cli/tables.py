"""`perfmodel import-tables`: a model file from a CSV of TorchRec-style tables."""

from __future__ import annotations

import shlex

from . import io


def register(sub) -> None:
    p = sub.add_parser(
        "import-tables", help="write a model file from a CSV of tables (TorchRec's EmbeddingBagConfig fields)",
        description="Read a CSV of embedding tables, one per row, with the columns of TorchRec's EmbeddingBagConfig: "
                    "name, num_embeddings, embedding_dim, feature_names (several separated by ';'), and optionally "
                    "pooling_factor (mean lookups per sample of each feature: one number, or one per feature separated "
                    "by ';'), data_type (FP32, FP16, BF16, ...; default FP32) and pooling (SUM, MEAN, NONE). Write a "
                    "model file with the dense part of --dense, its widths following the tables, and a source line "
                    "per table; `--model OUT` reads it.")
    p.add_argument("csv", help="the CSV of tables")
    p.add_argument("--dense", default="dlrm-dcnv2-mlperf", help="model preset or TOML whose dense part and settings "
                   "are reused (default dlrm-dcnv2-mlperf)")
    p.add_argument("--batch", type=int, help="global batch, samples per step (default: the --dense preset's)")
    p.add_argument("--pooling-factor", type=float, metavar="LOOKUPS",
                   help="mean lookups per sample of every feature whose row gives no pooling_factor")
    p.add_argument("--name", help="the model's name (default: the CSV's file name)")
    io.add_output(p, "--out", io.MODEL, required=True, metavar="PATH", help="model TOML to write (never overwrites)")
    p.set_defaults(func=_cmd_import_tables)


def _cmd_import_tables(args) -> int:
    from ..config import ConfigError
    from ..interop.tables import import_tables, read_tables
    if args.pooling_factor is not None and not 1e-3 <= args.pooling_factor <= 1e5:
        raise ConfigError("", "--pooling-factor", f"must be a number of lookups per sample from 0.001 to 1e5, got "
                          f"{args.pooling_factor:g}")
    command = "perfmodel import-tables " + " ".join(shlex.quote(a) for a in [args.csv, "--dense", args.dense] + (
        ["--batch", str(args.batch)] if args.batch is not None else []) + (
        ["--pooling-factor", f"{args.pooling_factor:g}"] if args.pooling_factor is not None else []) + (
        ["--name", args.name] if args.name else []) + ["--out", args.out])
    model = import_tables(args.csv, args.out, dense=args.dense, global_batch=args.batch, name=args.name,
                          pooling_factors=args.pooling_factor, command=command)
    print(f"wrote {args.out}: model {model.name!r}, {model.tables.count} tables, global batch "
          f"{int(float(model.global_batch)):,} (perfmodel search --system SYSTEM --model {args.out})")
    shared = [t for t in read_tables(args.csv, args.pooling_factor) if len(t.features) > 1]
    if shared:                      # TorchRec's pooling factors are per feature: say what that adds up to
        t = shared[0]
        print(f"{len(shared)} table(s) read by several features look up each feature's pooling factor per sample, "
              f"summed: {t.name} {' + '.join(f'{p:g}' for p in t.pooling)} = {sum(t.pooling):g} rows per sample")
    return 0
