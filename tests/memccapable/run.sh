#!/usr/bin/env bash
# Debian's memccapable (libmemcached-tools) against cairn started with its defaults only: a
# fresh data folder and free ports, nothing else (no --enable-admin, persistence sync).
#
#   tests/memccapable/run.sh [--cairn BIN] [--check] [-- MEMCCAPABLE ARGS]
#
# Runs `memccapable -v` (its 27 ASCII tests and its 27 binary tests; `-- -a` or `-- -b` for
# one of the two) and prints one line a test, then the count.
# --check: exit 1 when a test's result differs from expected-failures.txt (the CI mode).
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CAIRN="${CAIRN_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/cairn}"
CHECK=0
ARGS=()
while [ $# -gt 0 ]; do
    case "$1" in
    --cairn) CAIRN="$2"; shift 2 ;;
    --check) CHECK=1; shift ;;
    --) shift; ARGS=("$@"); break ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
if ! command -v memccapable >/dev/null; then
    if [ -n "${CI:-}" ]; then echo "memccapable missing under CI" >&2; exit 1; fi
    echo "memccapable skipped: not installed (apt-get install libmemcached-tools)"
    exit 0
fi
DATA="$(mktemp -d)"
OUT="$DATA.out"
ERR="$DATA.err"
LOG="$DATA.log"
"$CAIRN" -p 0 --data-dir "$DATA" >"$LOG" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$DATA" "$OUT" "$OUT.tests" "$ERR" "$LOG"' EXIT
# Ready once it prints "cairn listening on ADDR" (polled, up to 60 s).
ADDR=""
for _ in $(seq 1200); do
    ADDR="$(sed -n 's/^cairn listening on //p' "$LOG")"
    [ -n "$ADDR" ] && break
    kill -0 $PID 2>/dev/null || break
    sleep 0.05
done
[ -n "$ADDR" ] || { echo "cairn did not get ready:" >&2; tail -5 "$LOG" >&2; exit 1; }
START=$(date +%s)
timeout 300 memccapable -v -t 10 -h "${ADDR%:*}" -p "${ADDR##*:}" "${ARGS[@]}" >"$OUT" 2>"$ERR"
RC=$?
# memccapable prints "ascii NAME   [pass]" a test on stdout; a failed test's name is followed
# there by the assertion that failed (file:line: expression, no newline), and its "[FAIL]" and
# the reply it did not expect go to stderr. One line a test: split before each test's name.
sed -E 's/(ascii|binary) [a-z]/\n&/g' "$OUT" | grep -E '^(ascii|binary) ' >"$OUT.tests"
results() {
    case "$1" in
    pass) sed -nE 's/^(.*[^ ]) +\[pass\]$/\1/p' "$OUT.tests" ;;
    FAIL) grep -vE '\[(pass|skipped)\]$' "$OUT.tests" | sed -E 's/^((ascii|binary) [a-z ]*[a-z]) {2,}.*/\1/' ;;
    esac
}
sed -E 's/(ascii|binary) [a-z]/\n&/g' "$OUT" | grep . | sed 's/^/  /'
if [ -s "$ERR" ]; then
    echo "  memccapable's stderr:"
    tr -d '\r' <"$ERR" | grep -v '^$' | sed 's/^/    /'
fi
PASS=$(results pass | grep -c .)
FAILS=$(results FAIL)
echo "memccapable ${ARGS[*]:-(ascii and binary)}: $PASS pass, $(grep -c . <<<"$FAILS") FAIL, exit $RC, $(($(date +%s) - START)) s"
if [ "$CHECK" = 1 ]; then
    # expected-failures.txt: "NAME | why" a line.
    EXPECTED=$(grep -v '^#' "$HERE/expected-failures.txt" | sed -nE 's/^([^|]*[^ |]) *\|.*/\1/p' | sort)
    if [ "$(sort <<<"$FAILS" | grep .)" != "$EXPECTED" ] || [ "$RC" = 124 ]; then
        echo "memccapable: the failing tests differ from expected-failures.txt (< expected, > now):" >&2
        diff <(echo "$EXPECTED") <(sort <<<"$FAILS" | grep .) >&2
        exit 1
    fi
fi
exit 0
