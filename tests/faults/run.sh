#!/usr/bin/env bash
# Runs the fault bench with kazoo from a venv of its own (target/faults-venv), made on first
# use: tests/faults/run.sh --rounds 20 --replication sync --seed 1 --out target/faults/sync
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=target/faults-venv
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import kazoo" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q -r tests/faults/requirements.txt
fi
exec "$venv/bin/python" -m tests.faults "$@"
