#!/bin/bash
# fio on the flash file that scripts/flash-f2-by-hand.sh left in /tmp/f2d: steady QD 24 against
# bursts (16 or 32 reads submitted at once once as many completed), two rounds, with the block
# layer's reads/s, mean latency and reads in flight: does a burstier depth, at about the same
# mean, cost the device time? Run it in a hold of the bench lock.
F=/tmp/f2d/cairn.flash
DEV=${DEV:-$(lsblk -no KNAME "$(findmnt -no SOURCE -T /tmp)" 2>/dev/null | head -1)}
devstat() { echo "$(awk '{print $1, $4}' /sys/class/block/$DEV/stat) $(date +%s%3N)"; }
devline() { echo "$1 $2" | awk '{r=$4-$1; t=$5-$2; ms=$6-$3; printf "  block layer: %.0f reads/s, mean %.0f us, in flight %.1f\n", r*1000/ms, t*1000/r, t/ms}'; }
run() { S0=$(devstat); echo "fio $*"; fio --name=r --ioengine=io_uring --direct=1 --rw=randread --bs=4k --size=200m --runtime=6 --time_based --output-format=json --filename=$F "$@" | python3 -c "
import json,sys
j=json.load(sys.stdin)['jobs']; print('  fio: %.0f IOPS' % sum(x['read']['iops'] for x in j))"; devline "$S0" "$(devstat)"; }
for r in 1 2; do
  run --iodepth=24
  run --iodepth=32 --iodepth_batch_submit=16 --iodepth_batch_complete_min=16
  run --iodepth=40 --iodepth_batch_submit=32 --iodepth_batch_complete_min=32
done
