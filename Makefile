# The README's first two commands. Each creates (or reuses) the virtualenv in .venv.
PYTHON ?= python3
VENV ?= .venv
BIN = $(VENV)/bin
STAMP = $(VENV)/.installed

.PHONY: demo test venv golden clean

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

# Regenerates and checks the transformers golden fixtures (needs torch + transformers; see tests/fixtures/README.md).
golden:
	$(PYTHON) -m venv .venv-ref
	.venv-ref/bin/python -m pip install -q torch==2.13.0 transformers==4.57.6 safetensors numpy
	.venv-ref/bin/python tests/fixtures/make_transformers_golden.py --check

clean:
	rm -rf $(VENV) .venv-ref build *.egg-info
