# The README's first two commands. Each creates (or reuses) the virtualenv in .venv.
PYTHON ?= python3
VENV ?= .venv
BIN = $(VENV)/bin
STAMP = $(VENV)/.installed

.PHONY: demo test test-quick venv docs golden benchmark compat clean

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/xlnet-tf demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

# The quick loop after each edit: the tests that need no training run, no server and no subprocess (under 4 minutes
# on 2 cores; docs/development.md). `make test` stays the whole suite, and is what CI runs.
test-quick: $(STAMP)
	XLNET_TF_QUICK_TESTS=1 $(BIN)/python -m pytest -q -m "not slow"

# The documentation site (mkdocs.yml, docs/) into site/; --strict: a broken link or a page missing from the nav fails.
# docs/cli.md is generated: `$(BIN)/python docs/gen_cli.py` after changing a command's flags.
docs: $(STAMP)
	$(BIN)/mkdocs build --strict --site-dir site

# Regenerates and checks the transformers golden fixtures (needs torch + transformers; see tests/fixtures/README.md).
golden:
	$(PYTHON) -m venv .venv-ref
	.venv-ref/bin/python -m pip install -q torch==2.13.0 transformers==4.57.6 safetensors numpy
	.venv-ref/bin/python tests/fixtures/make_transformers_golden.py --check

# `xlnet-tf benchmark` beside keras-hub, TensorFlow Model Garden and transformers (about 45 minutes on 2 cores;
# writes benchmark_results/). Their own environment, so that `make test` never installs them.
BENCH_VENV = .venv-bench
$(BENCH_VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install -q --upgrade pip
	$(BENCH_VENV)/bin/python -m pip install -q -e '.[benchmark]'
	$(BENCH_VENV)/bin/python -m pip install -q --no-deps tf-models-official==2.20.0
	touch $@

benchmark: $(BENCH_VENV)/.installed
	$(BENCH_VENV)/bin/xlnet-tf benchmark --output-dir benchmark_results

# Do the exports load and answer the same in TensorFlow 2.12's runtime with TF Text 2.12 (what TensorFlow Serving
# 2.12 and later link)? Tiny models of every export kind, made here, run in both (docs/serving-reference.md). Its own
# environment with only those two (and numpy < 2, which TensorFlow 2.12 needs), so that `make test` never installs it.
# Another runtime: make compat COMPAT_TF=2.11.1 COMPAT_TEXT=2.11.0 COMPAT_PYTHON=python3.10 (in .venv-tf211).
COMPAT_TF ?= 2.12.1
COMPAT_TEXT ?= 2.12.1
COMPAT_PYTHON ?= python3.11
COMPAT_VENV = .venv-tf$(subst .,,$(basename $(COMPAT_TF)))
$(COMPAT_VENV)/.installed:
	$(COMPAT_PYTHON) -m venv $(COMPAT_VENV)
	$(COMPAT_VENV)/bin/python -m pip install -q tensorflow==$(COMPAT_TF) tensorflow-text==$(COMPAT_TEXT) 'numpy<2'
	touch $@

compat: $(STAMP) $(COMPAT_VENV)/.installed
	$(BIN)/python -m xlnet_tf.benchmarks.compat --other-python $(COMPAT_VENV)/bin/python --output compat_results.json

clean:
	rm -rf $(VENV) .venv-ref $(BENCH_VENV) .venv-tf[0-9]* build *.egg-info site
