#!/bin/bash
# F2 by hand (docs/BENCHMARKS.md, "F2 and F3 on a quiet machine"): cairn with flash (-m 48), 2M keys
# of 100 B, then uniform gets at 2 x CLIENTS; prints gets/s, server CPU, vmstat and stats. Needs
# release builds at BIN and B. Run it in a hold of the bench lock.
# Also prints, for each get phase, the device's reads/s, mean read latency and mean reads in
# flight, from the block layer (scripts/blockstat.sh), and with FIO_QDS="1 16 50" then runs
# fio's 4 KiB random reads of the same flash file at those depths (SECS each, over its first
# FIO_SIZE, default 200m: written by then) with the same figures.
. "$(dirname "$0")/blockstat.sh"
PORT=21941; D=/tmp/f2d; BIN=${BIN:-target/release/cairn}; B=${B:-target/release/cairn-bench}
rm -rf $D; mkdir -p $D
env ${ENVS:-X=1} $BIN -p $PORT -t 2 --grpc-listen off --persistence off -m 48 --flash-path $D/cairn.flash --flash-size 548m --data-dir $D > $D/log 2>&1 &
PID=$!
for i in $(seq 100); do grep -q "cairn listening" $D/log && break; sleep 0.05; done
stats() { python3 - $PORT <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"stats\r\n"); b = b""
while not b.endswith(b"END\r\n"): b += s.recv(65536)
d = {l.split()[1]: l.split()[2] for l in b.decode().splitlines() if l.startswith("STAT")}
print(" ".join(f"{k}={d.get(k)}" for k in ("curr_items", "flash_items", "get_hits", "get_misses")))
PY
}
$B -s 127.0.0.1 -p $PORT -t 2 -c 25 -d 100 --key-pattern P:P --ratio 1:0 --key-minimum 1 --key-maximum 2000000 -n 40000 --quiet > /dev/null 2>&1
stats
for C in ${CLIENTS:-25}; do
  T0=$(awk '{print $14+$15}' /proc/$PID/stat); S0=$(devstat)
  vmstat 2 4 > /tmp/f2vm.txt &
  $B -s 127.0.0.1 -p $PORT -t 2 -c $C -d 100 --key-pattern R:R --ratio 0:1 --key-minimum 1 --key-maximum 2000000 --distinct-client-seed --seed ${SEED:-$C} --test-time ${SECS:-8} 2>&1 | grep -E "^Gets" | awk -v c=$C '{print "clients 2x" c ": gets/s", $2, "hits/s", $3, "misses/s", $4, "avg ms", $6, "p50", $7, "p99", $9}'
  T1=$(awk '{print $14+$15}' /proc/$PID/stat); S1=$(devstat)
  echo "  server CPU: $(( T1-T0 )) ticks of 1/100 s"; tail -3 /tmp/f2vm.txt
  devline "$S0" "$S1"
  stats
done
kill $PID; wait $PID 2>/dev/null
for QD in ${FIO_QDS:-}; do
  fio_randread $D/cairn.flash ${FIO_SIZE:-200m} ${SECS:-8} --iodepth=$QD
done
