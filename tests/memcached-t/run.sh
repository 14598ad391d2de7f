#!/usr/bin/env bash
# Runs memcached's own test suite (its t/*.t files and t/lib/MemcachedTest.pm, unchanged)
# against cairn: a builddir whose `memcached-debug` is our flag-mapping wrapper makes every
# test start cairn (README.md).
#
#   tests/memcached-t/run.sh [--version 1.6.18|1.6.45] [--strict] [--all] [--cairn BIN]
#                            [--check] [FILE.t ...]
#
#   --version 1.6.18  (default) the suite of Debian 12 (bookworm)'s source package of memcached
#   --version 1.6.45  the suite of Debian testing (forky)'s source package, memcached 1.6.45-1
#                     (skipped with a note once testing has moved on to a newer memcached)
#   MEMCACHED_GIT=DIR instead: `git archive VERSION t` of a memcached git directory (any tag)
#   --strict          memcached's start arguments exactly as its library builds them, nothing
#                     dropped or added (what a memcached user's scripts get)
#   --memcached BIN   run the suite against a real memcached instead, as a check of this
#                     harness (Debian's build lacks `-o relaxed_privileges`: dropped)
#   --drop "NAME ..." also drop these `-o` suboptions or flags (ext_path, -Z ...) from every start: a
#                     diagnostic, to see what a file does past a start cairn refuses
#   --all             every t/*.t file, not only the 25 of files.txt (for information)
#   --check           exit 1 when a file's result differs from expected-failures-VERSION.txt
#                     (a file listed there passes, or one not listed fails): the CI mode
#   FILE.t ...        only these files
# Prints one line a file (PASS, or FAIL with the assertions that failed), then a summary.
# Each file's full output and each server's log stay under target/memcached-t/run-VERSION/.
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VERSION=1.6.18
STRICT=0
MEMCACHED=0
EXTRA_DROP=""
ALL=0
CHECK=0
CAIRN="${CAIRN_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/cairn}"
FILES=()
while [ $# -gt 0 ]; do
    case "$1" in
    --version) VERSION="$2"; shift 2 ;;
    --strict) STRICT=1; shift ;;
    --all) ALL=1; shift ;;
    --drop) EXTRA_DROP="$2"; shift 2 ;;
    --check) CHECK=1; shift ;;
    --cairn) CAIRN="$2"; shift 2 ;;
    --memcached) CAIRN="$2"; MEMCACHED=1; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *.t) FILES+=("$1"); shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
[ -x "$CAIRN" ] || { echo "no cairn binary at $CAIRN (cargo build -p cairn-server --bin cairn)" >&2; exit 2; }
# A missing tool or suite skips the run with a note, except under CI (CI set), where .ci/run
# installs them and their absence is a failure.
unavailable() {
    if [ -n "${CI:-}" ]; then echo "memcached t/: $1 (under CI)" >&2; exit 1; fi
    echo "memcached t/ skipped: $1"
    exit 0
}
command -v prove >/dev/null || unavailable "prove (Debian's perl) is not installed"
CAIRN="$(cd "$(dirname "$CAIRN")" && pwd)/$(basename "$CAIRN")"

WORK="${CARGO_TARGET_DIR:-$ROOT/target}/memcached-t"
SRC="$WORK/src-$VERSION-$([ -n "${MEMCACHED_GIT:-}" ] && echo git || echo debian)"
mkdir -p "$WORK"

# ---- the suite -------------------------------------------------------------------------------
# Debian's source package of memcached, through an apt state of this script's own under
# target/memcached-t/apt-SUITE (its own deb-src list and package lists: the machine's apt
# sources are neither needed nor changed; dpkg-dev unpacks it).
apt_source() {
    local suite="$1" want="$2" state="$WORK/apt-$1"
    rm -rf "$state" && mkdir -p "$state/etc" "$state/lists/partial" "$state/cache/archives/partial" "$state/src"
    local uri="http://deb.debian.org/debian"
    {
        printf 'Types: deb-src\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: %s\n' \
            "$uri" "$suite" /usr/share/keyrings/debian-archive-keyring.gpg
        if [ "$suite" = bookworm ]; then
            printf '\nTypes: deb-src\nURIs: %s-security\nSuites: bookworm-security\nComponents: main\nSigned-By: %s\n' \
                "$uri" /usr/share/keyrings/debian-archive-keyring.gpg
        fi
    } >"$state/etc/src.sources"
    local apt=(apt-get -q -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$state/etc"
        -o Dir::State::Lists="$state/lists" -o Dir::Cache="$state/cache" -o Debug::NoLocking=1)
    if ! "${apt[@]}" update >"$state/log" 2>&1; then
        tail -3 "$state/log" >&2
        unavailable "apt-get update for Debian $suite's sources failed"
    fi
    # The unpacked source, or (where the mirror lacks the .dsc, as Debian testing's here) the
    # upstream tarball apt fetched and checked against the Sources index.
    (cd "$state/src" && "${apt[@]}" source memcached >>"$state/log" 2>&1)
    local orig
    orig="$(ls "$state/src"/memcached_"$want".orig.tar.* 2>/dev/null | head -1)"
    if [ ! -d "$state/src/memcached-$want" ] && [ -n "$orig" ]; then
        mkdir -p "$state/src/memcached-$want"
        tar -x -f "$orig" -C "$state/src/memcached-$want" --strip-components=1 \
            "memcached-$want/t" "memcached-$want/doc/protocol.txt"
    fi
    if [ ! -f "$state/src/memcached-$want/t/lib/MemcachedTest.pm" ]; then
        if ls "$state/src" | grep -q '^memcached[-_]'; then
            # The suite moved on (a testing suite's memcached is newer now): say so, do not fail.
            echo "memcached t/ $want skipped: Debian $suite now has $(ls "$state/src" | grep '^memcached[-_]' | tr '\n' ' '); use MEMCACHED_GIT or another --version"
            exit 0
        fi
        tail -3 "$state/log" >&2
        unavailable "apt-get source memcached from Debian $suite failed (it needs dpkg-dev)"
    fi
    mv "$state/src/memcached-$want" "$SRC"
    rm -rf "$state"
}

if [ ! -f "$SRC/t/lib/MemcachedTest.pm" ]; then
    rm -rf "$SRC"
    if [ -n "${MEMCACHED_GIT:-}" ]; then
        mkdir -p "$SRC"
        git -C "$MEMCACHED_GIT" archive "$VERSION" t doc/protocol.txt | tar -x -C "$SRC"
    else
        case "$VERSION" in
        1.6.18) apt_source bookworm 1.6.18 ;;  # Debian 12, stable
        1.6.45) apt_source forky 1.6.45 ;;     # Debian testing, while it carries 1.6.45
        *) echo "--version $VERSION: give MEMCACHED_GIT (a memcached git directory)" >&2; exit 2 ;;
        esac
    fi
fi

RUN="$WORK/run-$VERSION$([ "$STRICT" = 1 ] && echo -strict)$([ "$MEMCACHED" = 1 ] && echo -memcached)"
rm -rf "$RUN"
mkdir -p "$RUN/build"
ln -s "$HERE/memcached-debug" "$RUN/build/memcached-debug"
ln -s "$HERE/timedrun" "$RUN/build/timedrun"
ln -s "$SRC/t" "$RUN/build/t"
: >"$RUN/pids"

if [ ${#FILES[@]} -eq 0 ]; then
    if [ "$ALL" = 1 ]; then
        while read -r f; do FILES+=("$f"); done < <(cd "$SRC/t" && ls -- *.t)
    else
        while read -r f; do FILES+=("$f"); done < <(grep -v '^#' "$HERE/files.txt" | grep .)
    fi
fi

stop_servers() {
    # Only the servers this run started (their pids, written by memcached-debug).
    local pid
    while read -r pid; do
        kill "$pid" 2>/dev/null && sleep 0.2 && kill -9 "$pid" 2>/dev/null
    done <"$RUN/pids"
    : >"$RUN/pids"
}
trap stop_servers EXIT

# ---- the probe: the arguments the library adds to every start --------------------------------
# MemcachedTest.pm adds `-u root` (as root), `-o relaxed_privileges` and `-U <free udp port>` to
# every server it starts. Each is tried once alone; those cairn refuses are dropped by the
# wrapper (unless --strict) and listed here, each a product gap.
probe() {
    local dir="$RUN/probe.$RANDOM" out
    mkdir -p "$dir"
    out="$(timeout 20 "$CAIRN" -p 0 --grpc-listen off --data-dir "$dir" "$@" 2>&1 | {
        while read -r line; do
            echo "$line"
            case "$line" in "cairn listening on "*) break ;; esac
        done
    })"
    rm -rf "$dir"
    if grep -q "^cairn listening on " <<<"$out"; then
        return 0
    fi
    printf '%s\n' "$out" | grep -iE 'error|unexpected|must|invalid|refus' | head -1 | cut -c1-150
    return 1
}
DROP=""
echo "memcached $VERSION t/ against $CAIRN$([ "$STRICT" = 1 ] && echo ' (strict: arguments unchanged)')"
for flag in "-u root" "-o relaxed_privileges" "-U 47211"; do
    [ "$STRICT" = 1 ] || [ "$MEMCACHED" = 1 ] && break
    # shellcheck disable=SC2086 # two words
    if why="$(probe $flag)"; then
        echo "  probe: cairn starts with $flag"
    else
        echo "  probe: cairn refuses $flag: $why"
        case "$flag" in
        -u*) DROP+=" -u" ;;
        -o*) DROP+=" relaxed_privileges" ;;
        -U*) DROP+=" -U" ;;
        esac
    fi
done
# The probe's servers were started in a pipeline that ended: none is left running.
DROP+="${EXTRA_DROP:+ $EXTRA_DROP}"
ADD=1
[ "$STRICT" = 1 ] && ADD=0
# memcached's library starts `memcached-debug`, its debug build, whose `debugtime N` moves the
# clock (expirations.t); cairn has that command behind a test-aid flag, added with the rest.
DEBUG_FLAGS="--enable-debug-commands"
if [ "$MEMCACHED" = 1 ]; then DROP=" relaxed_privileges"; ADD=0; fi
[ "$STRICT" = 1 ] || echo "  the wrapper drops:${DROP:- nothing}"

# ---- the files ---------------------------------------------------------------------------------
EXPECT="$HERE/expected-failures-$VERSION.txt"
# The list is cairn's: a run against a real memcached (--memcached) lists nothing as expected.
expected() { [ "$MEMCACHED" = 0 ] && grep -qE "^$1[[:space:]]" "$EXPECT" 2>/dev/null; }
PASS=0
FAIL=0
SKIP=0
UNEXPECTED=0
START=$(date +%s)
for f in "${FILES[@]}"; do
    [ -f "$SRC/t/$f" ] || { echo "no such file in $VERSION's t/: $f" >&2; exit 2; }
    t0=$(date +%s)
    out="$RUN/$f.out"
    (
        cd "$RUN/build" &&
            CAIRN_BIN="$CAIRN" CAIRN_T_RUN="$RUN" CAIRN_T_FILE="$f" CAIRN_T_DROP="$DROP" \
                CAIRN_T_ADD="$ADD" CAIRN_T_DEBUG_FLAGS="$DEBUG_FLAGS" timeout 60 prove -v "t/$f"
    ) >"$out" 2>&1 </dev/null
    rc=$?
    stop_servers
    secs=$(($(date +%s) - t0))
    if [ $rc = 0 ] && grep -q "^Result: NOTESTS" "$out"; then
        # plan skip_all: the file decided it does not apply (no proxy, no SSL_TEST, ...).
        SKIP=$((SKIP + 1))
        echo "SKIP $f: $(sed -n 's/^t\/.* \.\. skipped: //p' "$out" | head -1)"
    elif [ $rc = 0 ] && grep -q "^Result: PASS" "$out"; then
        PASS=$((PASS + 1))
        if expected "$f"; then
            echo "PASS $f (${secs}s)   <- listed in expected-failures-$VERSION.txt: remove it"
            UNEXPECTED=$((UNEXPECTED + 1))
        else
            echo "PASS $f (${secs}s)"
        fi
    else
        FAIL=$((FAIL + 1))
        tag=""
        if expected "$f"; then tag=" (expected)"; else UNEXPECTED=$((UNEXPECTED + 1)); fi
        [ $rc = 124 ] && tag+=" (timed out after 60 s)"
        echo "FAIL $f (${secs}s)$tag"
        if expected "$f"; then
            # Why is in the list; the diagnostics stay in the file's output.
            echo "    why: expected-failures-$VERSION.txt; its output: $out"
            continue
        fi
        # The failed assertions with their diagnostics, and why a file died or stopped early.
        grep -E "^not ok|^#   (Failed|at |  got|expected)|^# +(got|expected):|^#  +'|Failed to|croak|died|Dubious|Bad plan|planned|No subtests|Looks like|exited|Can't|unexpected argument|error:" "$out" |
            grep -v "^# Looks like your test exited with 0" | head -40 | sed 's/^/    /'
    fi
done
echo "memcached $VERSION t/: ${#FILES[@]} files, $PASS pass, $FAIL fail$([ "$SKIP" -gt 0 ] && echo ", $SKIP skipped"), $(($(date +%s) - START)) s; outputs in $RUN"
if [ "$CHECK" = 1 ] && [ "$UNEXPECTED" != 0 ]; then
    echo "$UNEXPECTED file(s) differ from expected-failures-$VERSION.txt" >&2
    exit 1
fi
exit 0
