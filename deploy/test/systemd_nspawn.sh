#!/usr/bin/env bash
# deploy/systemd/cairn.service under a real systemd: boots a Debian 12 container whose PID 1 is
# systemd (systemd-nspawn --boot, its own network namespace), installs the unit, the example
# config and the binary under test as deploy/README.md says, and checks:
#   - it starts, as a dynamic user, with no capabilities, NoNewPrivs and a seccomp filter, and
#     io_uring allowed (the journal says io_engine=uring) and the flash tier on io_uring;
#   - memcached and the metrics endpoint answer;
#   - systemctl stop: SIGTERM, a final checkpoint, exit 0;
#   - kill -9: restarted (Restart=on-failure), the acknowledged writes recovered;
#   - io_uring refused by a drop-in: cairn falls back to epoll and a pread pool and serves;
#   - a bad setting: exit code 2, not restarted (RestartPreventExitStatus=2).
# Not part of test-all.sh: it needs root, debootstrap and systemd-container (Debian's), and the
# first run fetches a Debian root (about 5 minutes) into ROOT (default target/nspawn-root,
# reused by later runs: about 30 s). Usage:
#   deploy/test/systemd_nspawn.sh [CAIRN_BINARY] [ROOT]
set -euo pipefail
cd "$(dirname "$0")/../.."
CAIRN="$(realpath "${1:-target/debug/cairn}")"
ROOT="$(realpath -m "${2:-target/nspawn-root}")"
MACHINE="cairn-unit-test-$$"
passed=0
failed=0

for tool in debootstrap systemd-nspawn nsenter; do
    command -v "$tool" >/dev/null || { echo "systemd test: $tool not found (Debian's debootstrap, systemd-container, util-linux)" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "systemd test: needs root" >&2; exit 1; }

if [ ! -e "$ROOT/usr/lib/systemd/systemd" ]; then
    echo "systemd test: a Debian 12 root into $ROOT (debootstrap, once)"
    mkdir -p "$ROOT"
    debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus,libnss-systemd,procps,curl \
        bookworm "$ROOT" http://deb.debian.org/debian >"$ROOT.debootstrap.log" 2>&1
fi

# A fresh install each run: the binary, the unit, the example config; no data, no drop-in.
rm -rf "$ROOT/var/lib/private/cairn" "$ROOT/var/lib/cairn" "$ROOT/etc/cairn" \
    "$ROOT/etc/systemd/system/cairn.service.d"
install -m 0755 "$CAIRN" "$ROOT/usr/local/bin/cairn"
install -m 0644 deploy/systemd/cairn.service "$ROOT/etc/systemd/system/cairn.service"
install -d -m 0755 "$ROOT/etc/cairn"
# The example config, with its flash tier on (a file in the state directory).
sed 's|^# flash_path = .*|flash_path = "/var/lib/cairn/cairn.flash"|; s|^# flash_size = .*|flash_size = 67108864|' \
    deploy/systemd/cairn.toml >"$ROOT/etc/cairn/cairn.toml"
ln -sf /etc/systemd/system/cairn.service "$ROOT/etc/systemd/system/multi-user.target.wants/cairn.service"

# --keep-unit and --register=no: no systemd or D-Bus needed on the host.
setsid systemd-nspawn -D "$ROOT" --boot --private-network --register=no --keep-unit \
    --machine="$MACHINE" --console=passive >"$ROOT.nspawn.log" 2>&1 &
NSPAWN=$!
LEADER=""
cleanup() {
    if [ -n "$LEADER" ]; then
        nsenter -t "$LEADER" -a systemctl poweroff >/dev/null 2>&1 || true
    fi
    for _ in $(seq 1 50); do
        kill -0 "$NSPAWN" 2>/dev/null || return 0
        sleep 0.2
    done
    kill "$NSPAWN" 2>/dev/null || true
}
trap cleanup EXIT

for _ in $(seq 1 100); do
    LEADER="$(pgrep -P "$NSPAWN" -x systemd || true)"
    [ -n "$LEADER" ] && break
    kill -0 "$NSPAWN" 2>/dev/null || { cat "$ROOT.nspawn.log" >&2; exit 1; }
    sleep 0.2
done
[ -n "$LEADER" ] || { echo "systemd test: the container's systemd did not start" >&2; exit 1; }
ct() { nsenter -t "$LEADER" -a "$@"; }
state=""
for _ in $(seq 1 150); do
    state="$(ct systemctl is-system-running 2>/dev/null || true)"
    case "$state" in running | degraded) break ;; esac
    sleep 0.2
done
echo "systemd test: container booted ($state), systemd $(ct systemctl --version | head -1 | cut -d' ' -f2)"

check() {
    local what="$1"
    shift
    if "$@"; then
        echo "  ok: $what"
        passed=$((passed + 1))
    else
        echo "  FAILED: $what" >&2
        failed=$((failed + 1))
    fi
}
prop() { ct systemctl show cairn -p "$1" --value; }
# A memcached exchange inside the container: the lines to send, then what came back within 1 s.
mc() { ct bash -c 'exec 3<>/dev/tcp/127.0.0.1/11211; printf "$1" >&3; timeout 1 cat <&3 || true' _ "$1" 2>/dev/null; }
wait_active() {
    for _ in $(seq 1 50); do
        [ "$(prop ActiveState)" = active ] && mc 'version\r\n' | grep -q VERSION && return 0
        sleep 0.2
    done
    return 1
}
journal_has() { ct journalctl -u cairn --no-pager | grep -q "$1"; }

check "the unit is active and serving" wait_active
pid="$(prop MainPID)"
check "a dynamic user, no capabilities, NoNewPrivs, a seccomp filter" \
    bash -c "ct() { nsenter -t $LEADER -a \"\$@\"; }; s=\$(ct cat /proc/$pid/status); \
        ! grep -qE '^Uid:\s+0\s' <<<\"\$s\" && grep -qE '^CapEff:\s+0+$' <<<\"\$s\" \
        && grep -qE '^CapBnd:\s+0+$' <<<\"\$s\" && grep -qE '^NoNewPrivs:\s+1' <<<\"\$s\" \
        && grep -qE '^Seccomp:\s+2' <<<\"\$s\""
check "io_uring allowed: connections and flash reads on io_uring" \
    bash -c "nsenter -t $LEADER -a journalctl -u cairn --no-pager | grep -q 'connection threads started io_engine=\"uring\"' \
        && nsenter -t $LEADER -a journalctl -u cairn --no-pager | grep -q 'io=\"io_uring\"'"
check "set and get" bash -c "[ \"\$(nsenter -t $LEADER -a bash -c 'exec 3<>/dev/tcp/127.0.0.1/11211; printf \"set k 0 0 5\r\nhello\r\nget k\r\n\" >&3; timeout 1 cat <&3' | tr -d '\r' | tr '\n' ' ')\" = 'STORED VALUE k 0 5 hello END ' ]"
check "the metrics endpoint" bash -c "nsenter -t $LEADER -a curl -sf 127.0.0.1:9150/metrics | grep -q '^cairn_writes_refused 0'"

ct systemctl stop cairn
check "stop: SIGTERM, a final checkpoint, exit 0" \
    bash -c "[ \"\$(nsenter -t $LEADER -a systemctl show cairn -p Result --value)\" = success ] \
        && [ \"\$(nsenter -t $LEADER -a systemctl show cairn -p ExecMainStatus --value)\" = 0 ] \
        && nsenter -t $LEADER -a journalctl -u cairn --no-pager | grep -q 'checkpoint done'"

ct systemctl start cairn
wait_active || true
mc 'set acked 0 0 3\r\nabc\r\n' | grep -q STORED
ct kill -9 "$(prop MainPID)"
sleep 3 # RestartSec=2s
wait_active || true
check "kill -9: restarted, the acknowledged writes recovered" \
    bash -c "[ \"\$(nsenter -t $LEADER -a systemctl show cairn -p NRestarts --value)\" = 1 ] \
        && nsenter -t $LEADER -a bash -c 'exec 3<>/dev/tcp/127.0.0.1/11211; printf \"get acked k\r\n\" >&3; timeout 1 cat <&3' | grep -c VALUE | grep -qx 2"

mkdir -p "$ROOT/etc/systemd/system/cairn.service.d"
printf '[Service]\nSystemCallFilter=~io_uring_setup io_uring_enter io_uring_register\n' \
    >"$ROOT/etc/systemd/system/cairn.service.d/no-io-uring.conf"
ct systemctl daemon-reload
ct systemctl restart cairn
wait_active || true
check "io_uring refused by a drop-in: epoll and a pread pool, still serving" \
    bash -c "nsenter -t $LEADER -a journalctl -u cairn --no-pager | grep -q 'connections are served by the tokio engine' \
        && nsenter -t $LEADER -a journalctl -u cairn --no-pager | grep -q 'io=\"pread\"' \
        && nsenter -t $LEADER -a bash -c 'exec 3<>/dev/tcp/127.0.0.1/11211; printf \"get acked\r\n\" >&3; timeout 1 cat <&3' | grep -q VALUE"
rm -rf "$ROOT/etc/systemd/system/cairn.service.d"
ct systemctl daemon-reload

echo 'no_such_setting = 1' >>"$ROOT/etc/cairn/cairn.toml"
ct systemctl restart cairn || true
sleep 3
check "a bad setting: exit code 2, not restarted" \
    bash -c "[ \"\$(nsenter -t $LEADER -a systemctl show cairn -p ExecMainStatus --value)\" = 2 ] \
        && [ \"\$(nsenter -t $LEADER -a systemctl show cairn -p ActiveState --value)\" = failed ] \
        && [ \"\$(nsenter -t $LEADER -a systemctl show cairn -p NRestarts --value)\" = 0 ]"

echo "systemd: $passed passed, $failed failed"
[ "$failed" = 0 ]
