#!/bin/bash
# Controls for F2's device latency (docs/BENCHMARKS.md, "F2: how many reads cairn keeps at the
# device"): fio at QD 24 on the flash file that scripts/flash-f2-by-hand.sh left in /tmp/f2d,
# alone, beside a RAM-only cairn serving 2 x 25 get clients on the same 2 cores (F2's CPU and
# loopback load without its device reads), and as 2 jobs x QD 12 (two submitting threads), two
# rounds, with the block layer's reads/s, mean latency and reads in flight each time. Needs the
# release builds at BIN (cairn, cairn-bench) and fio; run it in a hold of the bench lock.
. "$(dirname "$0")/blockstat.sh"
BIN=${BIN:-target/release}; F=/tmp/f2d/cairn.flash; PORT=21981
fioqd() { fio_randread $F 200m 8 --iodepth=${1:-24} ${2:-}; }
$BIN/cairn -p $PORT -t 2 --grpc-listen off --persistence off -m 1024 > /tmp/ramonly.out 2>&1 &
P=$!
for i in $(seq 100); do grep -q "cairn listening" /tmp/ramonly.out && break; sleep 0.05; done
$BIN/cairn-bench -s 127.0.0.1 -p $PORT -t 2 -c 25 -d 100 --key-pattern P:P --ratio 1:0 --key-minimum 1 --key-maximum 200000 -n 4000 --quiet > /dev/null 2>&1
for r in 1 2; do
  echo "round $r: fio QD 24 alone"; fioqd 24
  echo "round $r: fio QD 24 beside RAM-only gets at 2 x 25"
  $BIN/cairn-bench -s 127.0.0.1 -p $PORT -t 2 -c 25 -d 100 --key-pattern R:R --ratio 0:1 --key-minimum 1 --key-maximum 200000 --test-time 11 2>&1 | grep -E "^Gets" | awk '{print "  gets/s", $2}' &
  B=$!; sleep 1.5; fioqd 24; wait $B
  echo "round $r: fio 2 jobs x QD 12 alone"; fioqd 12 "--numjobs=2"
done
kill $P; wait $P 2>/dev/null
