#!/usr/bin/env bash
# cairn in sync mode with the command log written buffered and with O_DIRECT, alternated
# (A B A B) on the same machine: 100% set, 2 threads x 25 connections, 50-byte values.
# usage: scripts/sync_direct_io_ab.sh [SECONDS] [ROUNDS]   (after cargo build --release)
set -euo pipefail
secs=${1:-8}
rounds=${2:-2}
bin=target/release
for round in $(seq "$rounds"); do
    for direct in false true; do
        data=$(mktemp -d)
        port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
        "$bin/cairn" -p "$port" -t 2 -m 1024 --persistence sync --data-dir "$data" \
            --log-direct-io "$direct" >/dev/null 2>&1 &
        pid=$!
        # Wait for the listener (polling, not a fixed sleep).
        until (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do sleep 0.05; done
        printf 'round %s, log_direct_io %-5s: ' "$round" "$direct"
        "$bin/cairn-bench" -p "$port" --threads 2 --clients 25 --ratio 1:0 --key-pattern R:R \
            --key-maximum 1000000 -d 50 --test-time "$secs" --quiet | grep Totals
        kill "$pid"
        wait "$pid" || true
        rm -rf "$data"
    done
done
