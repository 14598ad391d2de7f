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

`--watchers N` opens N watches on every key before each cairn server's tests: N processes of
`cairnctl --endpoint ADDR watch "" --relist` (the empty prefix matches every key; `--cairnctl`,
default target/release/cairnctl; their output to /dev/null), started once the server is ready
and stopped after its get test. The script waits until the server's `stats grpc` counts N
watches (grpc_watches) before the load starts, and reports the watch events the server sent
per op (grpc_watch_events_sent), the items it listed again per op
(grpc_watch_initial_items_sent) and the fewest watches still open after a test. `--relist`
keeps a watch that fell behind the server's history open (it lists every key again and goes
on, as a client that must see every key would): on 2 shared cores the watchers print slower
than memslap overwrites values of up to 5 KB, and without it each stops at the first gap
(after about 5% of the sets). ADDR is the server's `--grpc-listen` when its
arguments name one; otherwise the script adds `--grpc-listen 127.0.0.1:FREE` (a free port:
the default, memcached's port + 38840, lies past 65535 for the free ports the OS hands out, so
the server would pick one nobody can know). Servers with `--grpc-listen off`, and memcached,
get no watchers. The watchers run on the same cores as the server and memslap.

For each round and server (-t 2, a free loopback port), memslap's `set` test and then its
`get` test run; the server's utime + stime (procfs; stime alone is the table's kernel part)
and its own op count (`stats` cmd_get + cmd_set) are read around each test, and memslap's
reported time gives the ops/s.

    python3 scripts/memslap_side_by_side.py --rounds 3 --connections 50
    python3 scripts/memslap_side_by_side.py --rounds 3 --connections 50 --watchers 10 \
        --servers "api-on=target/release/cairn,memcached"
"""

import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from profile_request_path import cpu_secs, free_port, ops, start  # noqa: E402
from server_util import MemcachedText  # noqa: E402


def grpc_address(name, args):
    """(the server spec to start, the gRPC address to watch or None) for --watchers."""
    if args.watchers == 0 or name == "memcached":
        return name, None
    label, _, rest = name.partition("=")
    words = shlex.split(rest) if rest else [args.cairn_bin]
    if "--grpc-listen" in words:
        addr = words[words.index("--grpc-listen") + 1]
        return name, None if addr == "off" else addr
    addr = f"127.0.0.1:{free_port()}"
    return f"{label}={shlex.join(words + ['--grpc-listen', addr])}", addr


def watch_stats(port):
    """(watches open, watch events sent so far, initial-state items sent so far) from the
    server's `stats grpc`."""
    m = MemcachedText(f"127.0.0.1:{port}", timeout=10)
    try:
        g = m.stats("grpc")
    finally:
        m.close()
    return tuple(int(g.get(k, 0)) for k in
                 ("grpc_watches", "grpc_watch_events_sent", "grpc_watch_initial_items_sent"))


def open_watchers(args, port, addr):
    """Starts --watchers cairnctl watches of every key on `addr`; returns once the server
    counts them all open."""
    procs = [subprocess.Popen([args.cairnctl, "--endpoint", addr, "watch", "", "--relist"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for _ in range(args.watchers)]
    delay = 0.01
    while watch_stats(port)[0] < args.watchers:
        if any(p.poll() is not None for p in procs):
            close_watchers(procs)
            sys.exit(f"a cairnctl watch on {addr} exited before its watch opened")
        time.sleep(delay)
        delay = min(delay * 2, 0.1)
    return procs


def close_watchers(procs):
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait()


def run(name, args):
    port = free_port()
    name, watch_addr = grpc_address(name, args)
    server = start(name, args, port)
    rows = []
    watchers = []
    try:
        if watch_addr:
            watchers = open_watchers(args, port, watch_addr)
        for test in ("set", "get"):
            ops0, cpu0 = ops(port), cpu_secs(server.pid)
            _, sent0, items0 = watch_stats(port) if watchers else (0, 0, 0)
            out = subprocess.run(["memcslap", "-s", f"127.0.0.1:{port}", "-t", test, "-N",
                                  "-c", str(args.connections), "-e", str(args.execute)],
                                 capture_output=True, text=True)
            ops1, cpu1 = ops(port), cpu_secs(server.pid)
            open1, sent1, items1 = watch_stats(port) if watchers else (0, 0, 0)
            m = re.search(rf"Time to {test}\s+(\d+) keys by\s+\d+ threads:\s+([\d.]+) seconds",
                          out.stdout)
            if not m:
                sys.exit(f"memcslap {test} against {name}: {out.stdout}{out.stderr}")
            n = max(ops1 - ops0, 1)
            cpu = (cpu1[0] - cpu0[0]) + (cpu1[1] - cpu0[1])
            rows.append({"server": name.split("=", 1)[0], "test": test,
                         "ops_per_s": int(m.group(1)) / float(m.group(2)),
                         "cpu_us_per_op": cpu * 1e6 / n,
                         "kernel_us_per_op": (cpu1[1] - cpu0[1]) * 1e6 / n,
                         "watchers": bool(watchers), "events_per_op": (sent1 - sent0) / n,
                         "relisted_per_op": (items1 - items0) / n, "watches_open": open1})
        return rows
    finally:
        close_watchers(watchers)
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
    ap.add_argument("--watchers", type=int, default=0,
                    help="cairnctl watches of every key on each cairn server with the API on")
    ap.add_argument("--cairnctl", default="target/release/cairnctl")
    args = ap.parse_args()
    rows = []
    for _ in range(args.rounds):
        for name in args.servers.split(","):
            rows.extend(run(name, args))
            print(rows[-2:], file=sys.stderr)
    print(f"memslap, {args.connections} connections, {args.execute} ops each, "
          f"{args.watchers} watchers of every key on each cairn with the API on, medians of "
          f"{args.rounds} alternating rounds:\n")
    print("| test | server | ops/s | server CPU us/op | of it in the kernel | watch events sent per op "
          "| items relisted per op | watches open after |")
    print("|---|---|---|---|---|---|---|---|")
    for test in ("set", "get"):
        for name in dict.fromkeys(r["server"] for r in rows):
            mine = [r for r in rows if r["server"] == name and r["test"] == test]
            watch = "| - | - | - |"
            if mine[0]["watchers"]:
                watch = (f"| {statistics.median(r['events_per_op'] for r in mine):.2f} "
                         f"| {statistics.median(r['relisted_per_op'] for r in mine):.2f} "
                         f"| {min(r['watches_open'] for r in mine)} |")
            print(f"| {test} | {name} | {statistics.median(r['ops_per_s'] for r in mine):,.0f} | "
                  f"{statistics.median(r['cpu_us_per_op'] for r in mine):.2f} | "
                  f"{statistics.median(r['kernel_us_per_op'] for r in mine):.2f} {watch}")


if __name__ == "__main__":
    main()
