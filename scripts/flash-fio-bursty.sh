#!/bin/bash
# fio on the flash file that scripts/flash-f2-by-hand.sh left in /tmp/f2d: steady QD 24 against
# bursts (16 or 32 reads submitted at once once as many completed), two rounds, with the block
# layer's reads/s, mean latency and reads in flight: does a burstier depth, at about the same
# mean, cost the device time? Run it in a hold of the bench lock.
. "$(dirname "$0")/blockstat.sh"
run() { fio_randread /tmp/f2d/cairn.flash 200m 6 "$@"; }
for r in 1 2; do
  run --iodepth=24
  run --iodepth=32 --iodepth_batch_submit=16 --iodepth_batch_complete_min=16
  run --iodepth=40 --iodepth_batch_submit=32 --iodepth_batch_complete_min=32
done
