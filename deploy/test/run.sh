#!/usr/bin/env bash
# The operator's toolbox, checked (deploy/README.md):
#   1. promtool check rules + promtool test rules   (deploy/prometheus)
#   2. the dashboard's queries and the rules against a real cairn and a real Prometheus
#      (deploy/test/dashboard_test.py)
#   3. systemd-analyze verify of the unit, with ExecStart= on the binary under test, and
#      systemd-analyze security --offline: its exposure must stay at or below 2.0
#
# Usage: deploy/test/run.sh [CAIRN_BINARY] (default target/debug/cairn). $PYTHON runs the
# dashboard test (python3 by default; with grpcio and grpcio-tools it adds gRPC load).
# A missing tool (promtool and prometheus: Debian's prometheus; systemd-analyze: systemd) skips
# its part with a note, except under CI (CI set), where it fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
CAIRN="${1:-target/debug/cairn}"
PYTHON="${PYTHON:-python3}"
failed=0
skipped=()

missing() {
    if [ -n "${CI:-}" ]; then
        echo "deploy: $1 not found: .ci/run installs it (Debian's $2)" >&2
        failed=1
    else
        echo "deploy: $1 not found: its checks skipped (install Debian's $2)"
        skipped+=("$1")
    fi
}

step() {
    local name="$1"
    shift
    local start=$SECONDS
    if "$@"; then
        echo "deploy: $name ok ($((SECONDS - start)) s)"
    else
        echo "deploy: $name FAILED" >&2
        failed=1
    fi
}

if command -v promtool >/dev/null; then
    step "promtool check rules" promtool check rules deploy/prometheus/cairn-rules.yml
    # promtool resolves rule_files from the test file's folder.
    step "promtool test rules" promtool test rules deploy/prometheus/cairn-rules.test.yml
else
    missing promtool prometheus
fi

if command -v prometheus >/dev/null; then
    step "dashboard and rules against a real cairn and Prometheus" \
        "$PYTHON" deploy/test/dashboard_test.py --cairn "$CAIRN"
else
    missing prometheus prometheus
fi

verify_unit() {
    local tmp out
    tmp="$(mktemp -d)"
    # verify checks that ExecStart= names an executable: point it at the binary under test.
    sed "s|^ExecStart=/usr/local/bin/cairn|ExecStart=$(realpath "$CAIRN")|" \
        deploy/systemd/cairn.service >"$tmp/cairn.service"
    # verify exits 0 on a setting it ignores ("Failed to parse ..., ignoring"): any output fails.
    out="$(systemd-analyze verify "$tmp/cairn.service" 2>&1)" || true
    if [ -n "$out" ]; then
        echo "$out" >&2
        rm -rf "$tmp"
        return 1
    fi
    # --threshold is in tenths: 20 = an exposure of 2.0 (the unit scores 1.2).
    local rc=0
    out="$(systemd-analyze security --offline=true --threshold=20 "$tmp/cairn.service" 2>&1)" || rc=$?
    echo "$out" | tail -1
    rm -rf "$tmp"
    return $rc
}

if command -v systemd-analyze >/dev/null; then
    step "systemd-analyze verify and security" verify_unit
else
    missing systemd-analyze systemd
fi

if [ "$failed" != 0 ]; then
    echo "deploy: FAILED" >&2
    exit 1
fi
if [ "${#skipped[@]}" != 0 ]; then
    echo "deploy: passed, skipped for want of: ${skipped[*]}"
else
    echo "deploy: all checks passed"
fi
