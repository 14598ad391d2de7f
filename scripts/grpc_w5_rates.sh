#!/bin/bash
# W5 of issue 14 with one watch a stream (1,000 watches on `w5/`, 1,000 streams, 100 a
# connection) at several write rates: a fresh `cairn -t 2 --persistence off` each (plus the
# flags given), then `watch_bench fanout` for SECS (default 6): delivery latency, the server's
# and the client's CPU per event. BIN (default target/release) holds cairn and
# examples/watch_bench.
#
#   cargo build --release -p cairn-server && cargo build --release -p cairn-grpc --example watch_bench
#   flock /work/bench.lock scripts/grpc_w5_rates.sh "250 500 1000" [server flags...]
BIN=${BIN:-$(dirname "$0")/../target/release}; RATES=${1:?usage: $0 \"RATES\" [server flags...]}
shift
for R in $RATES; do
  D=$(mktemp -d)
  "$BIN/cairn" -p 22931 -t 2 --grpc-listen 127.0.0.1:22961 --persistence off -m 1024 \
    --data-dir "$D" "$@" > "$D/log" 2>&1 &
  P=$!
  for _ in $(seq 200); do grep -q "cairn listening" "$D/log" && break; sleep 0.05; done
  echo "== $R writes/s offered, server flags: $*"
  "$BIN/examples/watch_bench" fanout 127.0.0.1:22961 w5/ 1000 "$R" "${SECS:-6}" "$P" \
    --streams 1000 --connections 10 2>&1 | grep -v "^$"
  kill $P; wait $P 2>/dev/null; rm -rf "$D"
done
