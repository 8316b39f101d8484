# Sourced by infra/ci/lambda-python.sh and infra/ci/azure-worker-python.sh.
# find_python VERSION SCRIPT [PYTHON] prints the CPython VERSION (3.12, 3.13) to build a venv from:
# PYTHON when given, else a working pythonVERSION on PATH, else pyenv's newest VERSION.x; with none
# found it says so on stderr, in SCRIPT's name, and fails.
find_python() {
  local version=$1 script=$2 given=${3:-} found=""
  if [ -n "$given" ]; then
    found=$given
  elif "python$version" -c "" 2>/dev/null; then
    found=$(command -v "python$version")
  elif command -v pyenv >/dev/null; then
    found=$(ls -d "$(pyenv root)"/versions/"$version".*/bin/python"$version" 2>/dev/null |
      sort -V | tail -n 1)
  fi
  if [ -z "$found" ]; then
    echo "$script: no CPython $version found; pass one as the first argument" >&2
    return 1
  fi
  echo "$found"
}
