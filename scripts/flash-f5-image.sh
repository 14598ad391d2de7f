#!/bin/bash
# Makes an F5 crash image for recovery work (issue 13): cairn with -m 64, a flash file and
# persistence sync, KEYS keys of 100 bytes inserted in PARTS holds of the bench lock (the
# server idles between them; every key set: the last of the 50 clients takes the remainder
# of a part, so each client makes SPAN/50 + SPAN%50 requests), then kill -9. The data folder is left in $D for
# scripts/flash-f5-restart-ab.sh, which restarts copies of it.
#   BIN=target/release/cairn BENCH=target/release/cairn-bench KEYS=10000000 PARTS=2 \
#       D=/tmp/f5img scripts/flash-f5-image.sh
set -u
BIN=${BIN:-target/release/cairn}
BENCH=${BENCH:-target/release/cairn-bench}
KEYS=${KEYS:-10000000}
PARTS=${PARTS:-2}
D=${D:-/tmp/f5img}
PORT=${PORT:-21912}
LOCK=${LOCK:-/work/bench.lock}
ARGS="-p $PORT -t 2 --grpc-listen 127.0.0.1:0 -m 64 --persistence sync --flash-path $D/cairn.flash --flash-size 3g --data-dir $D ${EXTRA:-}"
rm -rf "$D"; mkdir -p "$D"
$BIN $ARGS > "$D/run1.log" 2>&1 &
PID=$!
for _ in $(seq 100); do grep -q 'cairn listening' "$D/run1.log" && break; sleep 0.1; done
for p in $(seq 0 $((PARTS-1))); do
  MIN=$(( 1 + KEYS*p/PARTS )); MAX=$(( KEYS*(p+1)/PARTS )); SPAN=$(( MAX-MIN+1 ))
  echo "part $p: keys $MIN..$MAX, $(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg)"
  flock "$LOCK" $BENCH -s 127.0.0.1 -p $PORT -t 2 -c 25 -d 100 --key-pattern P:P --ratio 1:0 \
      --key-minimum $MIN --key-maximum $MAX -n $(( SPAN/50 + SPAN%50 )) --quiet 2>&1 \
      | grep -E '^Totals' | head -1
done
python3 - $PORT <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
def cmd(c):
    s.sendall(c); b = b""
    while not b.endswith(b"END\r\n"): b += s.recv(65536)
    return b.decode()
keep = ("curr_items", "flash_items", "evictions", "checkpoints_done",
        "last_checkpoint_duration_ms", "snapshot_lsn")
for sec in (b"stats\r\n", b"stats persistence\r\n"):
    for l in cmd(sec).splitlines():
        if l.split(" ")[1:2] and l.split(" ")[1] in keep: print(l)
PY
kill -9 $PID; wait $PID 2>/dev/null
echo "killed at $(date -u +%T)"
