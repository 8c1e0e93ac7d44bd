"""notebooks/03_plan_search.ipynb runs top to bottom (nbclient, the venv's python3 kernel) in a fresh
temporary folder, so it cannot rot; its method comparison, plan tables, figures and computed conclusions
must come out."""

import pytest

pytest.importorskip("nbformat")
pytest.importorskip("nbclient")

from nbexec import NOTEBOOKS, execute  # noqa: E402
from nbexec import outputs as _outputs  # noqa: E402

NOTEBOOK = NOTEBOOKS / "03_plan_search.ipynb"


# notebooks 02 and 03 search MLPerf on the same two systems: on one worker, one after the other, the
# second loads the programs the first compiled (on two at once, both would compile them)
@pytest.mark.xdist_group("mlperf-notebooks")
def test_plan_search_notebook(tmp_path):
    # 30 rounds and 1-s samplers, not the reader's 200 and 3 s: the test checks that the comparison,
    # tables, figures and conclusions come out, not where a longer search lands
    nb, wall = execute(NOTEBOOK.name, tmp_path, ITERATIONS=30, SAMPLER_S=1.0)
    print(f"03_plan_search.ipynb executed in {wall:.1f} s")
    assert not _outputs(nb, "error")
    md = "\n".join(_outputs(nb, "markdown"))
    # the method comparison table, with every method, on both systems
    assert "Method comparison: dlrm-dcnv2-mlperf on mtia300-64" in md
    assert "Method comparison: dlrm-dcnv2-mlperf on h100-64" in md
    assert "| method | step time [ms] |" in md and "gap to best" in md
    for method in ("greedy", "gradient", "random", "evolutionary"):
        assert f"| {method} |" in md, method
    assert "INFEASIBLE" not in md
    # which tables go where, what overlaps, and the computed conclusions
    assert "| sharding type |" in md and "| table | rows |" in md and "| exposed comm [ms] |" in md
    for needle in ("Search on MTIA 300", "On H100", "Which tables go where", "What overlaps", "% of the step"):
        assert needle in md, needle
    assert len(_outputs(nb, "image")) >= 3            # method bars, per-device load/memory, timelines
    assert "chosen plan:" in "".join(_outputs(nb, "stream"))
