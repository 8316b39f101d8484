#!/usr/bin/env bash
# Install the Azurite storage emulator (npm package `azurite`) into an ignored folder of the repo.
# Idempotent: does nothing when the binary is already there. Usage: scripts/install-azurite.sh [DIR]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="${1:-${AZURITE_PREFIX:-$root/.ci/azurite}}"
bin="$prefix/node_modules/.bin/azurite-blob"
if [[ -x "$bin" ]]; then
    echo "azurite already installed: $bin"
    exit 0
fi
command -v npm >/dev/null || { echo "npm is required to install azurite" >&2; exit 1; }
mkdir -p "$prefix"
npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error "azurite@${AZURITE_VERSION:-3}"
[[ -x "$bin" ]] || { echo "azurite install finished but $bin is missing" >&2; exit 1; }
echo "azurite installed: $bin"
