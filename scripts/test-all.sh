#!/usr/bin/env bash
# Runs every test: the Rust workspace (unit, golden wire, real clients, memccapable when
# installed) and the pymemcache suite against the freshly built binary.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --workspace --all-targets
cargo test --workspace

if ! python3 -c "import pymemcache, pytest, prometheus_client" 2>/dev/null; then
    python3 -m pip install --quiet pymemcache pytest prometheus-client
fi
CAIRN_BIN="$PWD/target/debug/cairn" python3 -m pytest -q tests/python
