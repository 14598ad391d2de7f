#!/usr/bin/env bash
# Two cairn variants in sync mode, alternated (A B A B ...) on the same machine: 100% set,
# 2 threads x 25 connections, 50-byte values, uniform keys; prints cairn-bench's Totals line.
# A variant that names its own --persistence keeps it; RATIO=SET:GET changes the mix.
# NAME@DIR=... puts that variant's data folder under DIR (e.g. @/dev/shm: a tmpfs, where
# fdatasync costs nothing).
#
# usage: scripts/sync-insert-ab.sh SECONDS ROUNDS "NAME=BINARY [ARGS...]" "NAME=BINARY [ARGS...]"
# e.g.   scripts/sync-insert-ab.sh 8 2 \
#            "buffered=target/release/cairn --log-direct-io false" \
#            "direct=target/release/cairn --log-direct-io true"
set -euo pipefail
secs=$1
rounds=$2
shift 2
bench=${CAIRN_BENCH:-target/release/cairn-bench}
for round in $(seq "$rounds"); do
    for variant in "$@"; do
        name=${variant%%=*}
        read -r -a cmd <<<"${variant#*=}"
        parent=${TMPDIR:-/tmp}
        [[ $name == *@* ]] && parent=${name#*@}
        data=$(mktemp -d -p "$parent")
        port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
        mode=()
        [[ " ${cmd[*]} " == *" --persistence "* ]] || mode=(--persistence sync)
        "${cmd[@]}" -p "$port" -t 2 -m 1024 "${mode[@]}" --data-dir "$data" >/dev/null 2>&1 &
        pid=$!
        # Wait for the listener (polling, not a fixed sleep).
        until (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do sleep 0.05; done
        printf 'round %s, %-10s: ' "$round" "$name"
        "$bench" -p "$port" --threads 2 --clients 25 --ratio "${RATIO:-1:0}" --key-pattern R:R \
            --key-maximum 1000000 -d 50 --test-time "$secs" --quiet | grep Totals
        kill "$pid"
        wait "$pid" || true
        rm -rf "$data"
    done
done
