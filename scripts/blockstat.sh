# Sourced by the flash device scripts (flash-f2-by-hand.sh, flash-fio-controls.sh,
# flash-fio-bursty.sh): the block layer's figures over a span, and fio's random 4 KiB reads
# with those figures beside them. Needs fio, python3, findmnt and lsblk (util-linux).
#
# DEV: the disk under /tmp (the flash files' folder), or empty where /tmp has no block device
# (tmpfs); then the block-layer lines are left out.
DEV=${DEV:-$(lsblk -no KNAME "$(findmnt -no SOURCE -T /tmp)" 2>/dev/null | head -1)}
[ -r "/sys/class/block/$DEV/stat" ] || DEV=

# The block layer's reads completed, ms spent reading (summed over the reads in flight), and
# the time in ms. The whole disk: other I/O counts too.
devstat() { [ -n "$DEV" ] && echo "$(awk '{print $1, $4}' /sys/class/block/$DEV/stat) $(date +%s%3N)"; }

# `devline BEFORE AFTER`: reads/s, mean read latency and mean reads in flight (Little's law)
# between two devstat readings.
devline() {
  [ -n "$DEV" ] && echo "$1 $2" | awk -v dev=$DEV '{r=$4-$1; t=$5-$2; ms=$6-$3; if (ms > 0)
    printf "  device %s: %.0f reads/s, mean read latency %.0f us, mean reads in flight %.1f\n",
      dev, r*1000/ms, (r ? t*1000/r : 0), t/ms}'
}

# `fio_randread FILE SIZE SECS [fio options...]`: random 4 KiB reads of FILE's first SIZE
# (io_uring, O_DIRECT; an unwritten extent reads as zeros without touching the device, so
# keep SIZE within what was written), then fio's IOPS and total latency (submission to
# completion) and the block layer's figures over the run.
fio_randread() {
  local file=$1 size=$2 secs=$3; shift 3
  local s0; s0=$(devstat)
  fio --name=randread --ioengine=io_uring --direct=1 --rw=randread --bs=4k --size="$size" \
    --runtime="$secs" --time_based --lat_percentiles=1 --group_reporting \
    --output-format=json --filename="$file" "$@" | python3 -c "
import json, sys
r = json.load(sys.stdin)['jobs'][0]['read']
print('fio $*: %.0f IOPS, total latency p50 %.0f us, mean %.0f us' % (r['iops'],
      r['lat_ns']['percentile']['50.000000'] / 1000, r['lat_ns']['mean'] / 1000))"
  devline "$s0" "$(devstat)"
}
