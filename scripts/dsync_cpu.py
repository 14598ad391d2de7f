#!/usr/bin/env python3
"""The CPU one durable write costs on this machine: `pwritev2(RWF_DSYNC)` of SIZE bytes, N
times, in place in a preallocated file opened with O_DIRECT (as cairn's log writes its
segments), with the process's user and system CPU (getrusage) and its context switches a
write. Run it on the disk the log uses, beside the durability suite:

    python3 scripts/dsync_cpu.py 4096 3000 ./dsync-test.bin
"""

import mmap
import os
import resource
import sys
import time

FILE_BYTES = 64 << 20


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    size, n, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    if size <= 0 or size % 4096 or n <= 0:
        sys.exit("SIZE must be a positive multiple of 4096 and N positive")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o600)
    try:
        os.posix_fallocate(fd, 0, FILE_BYTES)
        buf = mmap.mmap(-1, size)  # page-aligned, as O_DIRECT needs
        buf.write(b"x" * size)
        for i in range(50):  # the file's blocks written once before timing
            os.pwritev(fd, [buf], (i * size) % FILE_BYTES, os.RWF_DSYNC)
        r0, t0, lat = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter(), []
        for i in range(n):
            a = time.perf_counter()
            os.pwritev(fd, [buf], (i * size) % FILE_BYTES, os.RWF_DSYNC)
            lat.append(time.perf_counter() - a)
        t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    finally:
        os.close(fd)
        os.unlink(path)
    lat.sort()
    print(f"size {size} n {n}: wall {(t1 - t0) / n * 1e6:.0f} us a write "
          f"(p50 {lat[n // 2] * 1e6:.0f}), user {(r1.ru_utime - r0.ru_utime) / n * 1e6:.1f} us, "
          f"sys {(r1.ru_stime - r0.ru_stime) / n * 1e6:.1f} us a write, voluntary/involuntary "
          f"switches {(r1.ru_nvcsw - r0.ru_nvcsw) / n:.2f}/{(r1.ru_nivcsw - r0.ru_nivcsw) / n:.2f} "
          "a write")


if __name__ == "__main__":
    main()
