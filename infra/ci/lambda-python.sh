#!/usr/bin/env bash
# A CPython 3.12 environment with the Lambda image's packages at the image's pins, for the
# bootstrap test (tests/handlers/aws_lambda/test_lambda_runtime.py runs awslambdaric on it):
#   infra/ci/lambda-python.sh [PYTHON3.12]      -> .ci/py312/bin/python
set -euo pipefail
cd "$(dirname "$0")/../.."
# The interpreter: the argument, else a working python3.12 on PATH, else pyenv's newest 3.12.
source infra/ci/find-python.sh
PY=$(find_python 3.12 lambda-python.sh "${1:-}")
"$PY" -m venv --clear .ci/py312
# As infra/lambda/Dockerfile installs: every version from the constraints, OpenVINO as a wheel.
PIP_CONSTRAINT="$PWD/infra/constraints.txt" .ci/py312/bin/pip install --quiet \
  --disable-pip-version-check --only-binary=openvino ".[aws]"
.ci/py312/bin/python -c "import sys, openvino; print(sys.version.split()[0], openvino.get_version())"
