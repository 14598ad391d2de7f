#!/bin/bash
# Restarts one F5 crash image (scripts/flash-f5-image.sh) with each build in turn, ROUNDS
# times (A B A B ...), timing each from start to "cairn listening" and printing recovery's
# steps and counters. Run it in a hold of the bench lock:
#   flock /work/bench.lock env IMG=/tmp/f5img ROUNDS=2 scripts/flash-f5-restart-ab.sh A B
# Each restart gets a fresh copy of the image's data folder; the flash file is used in
# place (recovery writes only its superblock and free segments, never one a checkpoint
# pinned, so the image's pins stay true). The copied log is dropped from the page cache
# (written with O_DIRECT, it is cold after a kill -9); the snapshot, written through the
# page cache, stays cached as it would.
set -u
IMG=${IMG:-/tmp/f5img}
W=${W:-/tmp/f5work}
PORT=${PORT:-21913}
ROUNDS=${ROUNDS:-2}
for r in $(seq "$ROUNDS"); do
 for BIN in "$@"; do
  rm -rf "$W"; mkdir -p "$W"
  cp -a "$IMG"/MANIFEST "$IMG"/*.pins "$IMG"/*.snap "$IMG"/log "$W"/; sync
  python3 - "$W" <<'PY'
import os, sys
for root, _, files in os.walk(sys.argv[1] + "/log"):
    for f in files:
        fd = os.open(os.path.join(root, f), os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
PY
  ARGS="-p $PORT -t 2 --grpc-listen 127.0.0.1:0 -m 64 --persistence sync --flash-path $IMG/cairn.flash --flash-size 3g --data-dir $W ${EXTRA:-}"
  LOAD=$(cut -d' ' -f1 /proc/loadavg)
  T0=$(date +%s%N)
  $BIN $ARGS > "$W/run.log" 2>&1 &
  PID=$!
  while ! grep -q 'cairn listening' "$W/run.log"; do
    sleep 0.005
    kill -0 $PID 2>/dev/null || { echo "$BIN died"; tail "$W/run.log"; exit 1; }
  done
  T1=$(date +%s%N)
  echo "round $r $(basename "$BIN"): listening after $(( (T1-T0)/1000000 )) ms (load $LOAD): $(grep -o 'recovery done.*' "$W/run.log")"
  python3 - $PORT <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
def cmd(c):
    s.sendall(c); b = b""
    while not b.endswith(b"END\r\n"): b += s.recv(65536)
    return b.decode()
keep = ("curr_items", "flash_items", "evictions", "recovered_flash_items",
        "recovery_flash_dropped", "recovery_replayed_to_flash", "recovered_log_records",
        "recovery_dropped_items", "flash_verify_reads", "flash_tag_drops")
out = []
for sec in (b"stats\r\n", b"stats persistence\r\n"):
    for l in cmd(sec).splitlines():
        if l.split(" ")[1:2] and l.split(" ")[1] in keep: out.append(l[5:])
print("   ", ", ".join(out))
PY
  kill -9 $PID; wait $PID 2>/dev/null  # no shutdown checkpoint: the copy is thrown away
 done
done
