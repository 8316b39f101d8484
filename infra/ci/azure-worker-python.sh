#!/usr/bin/env bash
# A CPython 3.13 environment with the Azure Functions Python worker library
# (azure-functions-runtime, the worker for Python >= 3.13, which needs azure-functions 2.x)
# and the serving packages at the image's pins, for tests/handlers/test_azure_worker.py:
#   infra/ci/azure-worker-python.sh [PYTHON3.13]      -> .ci/py313/bin/python
set -euo pipefail
cd "$(dirname "$0")/../.."
# The interpreter: the argument, else a working python3.13 on PATH, else pyenv's newest 3.13.
source infra/ci/find-python.sh
PY=$(find_python 3.13 azure-worker-python.sh "${1:-}")
"$PY" -m venv --clear .ci/py313
pin() { grep -E "^$1==" infra/constraints.txt; }
.ci/py313/bin/pip install --quiet --disable-pip-version-check --only-binary=openvino \
  azure-functions-runtime "$(pin openvino)" "$(pin numpy)" "$(pin pillow)" "$(pin orjson)" \
  "$(pin pysimdjson)" "$(pin azure-storage-blob)" "$(pin azure-identity)"
.ci/py313/bin/python -c "import sys, azure_functions_runtime, azure.functions as f; print(sys.version.split()[0], f.__version__)"
