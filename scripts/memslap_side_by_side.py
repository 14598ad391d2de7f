#!/usr/bin/env python3
"""A cross-check with a load generator nobody here wrote: libmemcached's memslap (Debian's
`memcslap`, in libmemcached-tools), against cairn (persistence off) and memcached, alternating.

memtier_benchmark is not packaged for Debian 12. The same package's memaslap (`memcaslap`)
sends keys that start with eight 0x10 bytes (cairn takes them, as memcached does, but they are
nobody's real keys). memslap uses libmemcached itself: one thread per connection, each running
`--execute-number` sets or gets of keys it loaded first.

memslap's items are not the seed's: random keys of about 20-60 bytes and values of about
250 B to 5 KB (2.6 KB an item on average as the store counts them), and its 50 threads set
the same keys, so nearly every set overwrites. With cairn's gRPC API on (the default) and a
watch open, each such set makes a watch event (with persistence off holding the new and the old
value); with nobody watching it makes none. Compare with `LABEL=PATH --grpc-listen off` to see
what the API costs a set (docs/PERFORMANCE.md, "Cache").

For each round and server (-t 2, a free loopback port), memslap's `set` test and then its
`get` test run; the server's utime + stime (procfs) and its own op count (`stats` cmd_get +
cmd_set) are read around each test, and memslap's reported time gives the ops/s.

    python3 scripts/memslap_side_by_side.py --rounds 3 --connections 50
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from profile_request_path import cpu_secs, free_port, ops, start  # noqa: E402


def run(name, args):
    port = free_port()
    server = start(name, args, port)
    rows = []
    try:
        for test in ("set", "get"):
            ops0, cpu0 = ops(port), cpu_secs(server.pid)
            out = subprocess.run(["memcslap", "-s", f"127.0.0.1:{port}", "-t", test, "-N",
                                  "-c", str(args.connections), "-e", str(args.execute)],
                                 capture_output=True, text=True)
            ops1, cpu1 = ops(port), cpu_secs(server.pid)
            m = re.search(rf"Time to {test}\s+(\d+) keys by\s+\d+ threads:\s+([\d.]+) seconds",
                          out.stdout)
            if not m:
                sys.exit(f"memcslap {test} against {name}: {out.stdout}{out.stderr}")
            n = max(ops1 - ops0, 1)
            cpu = (cpu1[0] - cpu0[0]) + (cpu1[1] - cpu0[1])
            rows.append({"server": name.split("=", 1)[0], "test": test,
                         "ops_per_s": int(m.group(1)) / float(m.group(2)),
                         "cpu_us_per_op": cpu * 1e6 / n})
        return rows
    finally:
        server.terminate()
        server.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cairn-bin", default="target/release/cairn")
    ap.add_argument("--servers", default="cairn,memcached",
                    help="comma separated: cairn, memcached, LABEL=PATH (another cairn build)")
    ap.add_argument("--connections", type=int, default=50, help="memslap threads")
    ap.add_argument("--execute", type=int, default=4000, help="ops per memslap thread")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rows = []
    for _ in range(args.rounds):
        for name in args.servers.split(","):
            rows.extend(run(name, args))
            print(rows[-2:], file=sys.stderr)
    print(f"memslap, {args.connections} connections, {args.execute} ops each, medians of "
          f"{args.rounds} alternating rounds:\n")
    print("| test | server | ops/s | server CPU us/op |")
    print("|---|---|---|---|")
    for test in ("set", "get"):
        for name in dict.fromkeys(r["server"] for r in rows):
            mine = [r for r in rows if r["server"] == name and r["test"] == test]
            print(f"| {test} | {name} | {statistics.median(r['ops_per_s'] for r in mine):,.0f} | "
                  f"{statistics.median(r['cpu_us_per_op'] for r in mine):.2f} |")


if __name__ == "__main__":
    main()
