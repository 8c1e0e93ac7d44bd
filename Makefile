# make demo: set up a virtual environment from this repo's files and run the main job on built-in defaults.
# make test: set up the same environment (with test tools) and run the test suite.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test bench torchrec clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/perfmodel search --system mtia300-64 --model dlrm-dcnv2-mlperf --compare greedy,evolutionary
	$(BIN)/perfmodel search --system h100-64 --model dlrm-dcnv2-mlperf --compare greedy,hugectr
	@echo "Next: . $(VENV)/bin/activate   (then the README's perfmodel commands run as written)"

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadgroup --durations=15 tests

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_evaluate.py

# make torchrec: TorchRec's own planner side by side with perfmodel's search (its own environment,
# .venv-torchrec/, with torch for the CPU and torchrec; not part of make test; the 300-table case is the long one).
torchrec:
	bash benchmarks/torchrec_env.sh
	.venv-torchrec/bin/python benchmarks/vs_torchrec.py

# make torchrec-test: perfmodel's TorchRec sharding plans against TorchRec's own (construct_module_sharding_plan,
# and its planner given the plan), in .venv-torchrec/; not part of make test.
.PHONY: torchrec-test
torchrec-test:
	bash benchmarks/torchrec_env.sh
	.venv-torchrec/bin/python -m pytest -q tests_torchrec

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis

# make figures: redraw the README's pictures (docs/img/*.png, each with its JSON of numbers and plans) from the
# presets, a searched plan per point (tests/test_figures.py checks them against the model).
.PHONY: figures
figures: $(STAMP)
	MPLBACKEND=Agg $(BIN)/python -m perfmodel.figures docs/img
