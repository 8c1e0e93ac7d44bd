"""TorchRec interop: tables in (EmbeddingBagConfigs, dicts, CSV -> a RankingModel) and a full
TorchRec ShardingPlan out."""

from .tables import import_tables, model_from_tables, read_tables
from .torchrec_plan import dmp_collection_args, load_torchrec_plan, to_torchrec_plan, torchrec_plan

__all__ = ["dmp_collection_args", "import_tables", "model_from_tables", "read_tables", "load_torchrec_plan", "to_torchrec_plan",
           "torchrec_plan"]
