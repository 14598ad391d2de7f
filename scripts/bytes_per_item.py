#!/usr/bin/env python3
"""Resident memory per item, side by side: cairn (one or more builds or settings), memcached,
redis-server.

Each server is started on a free loopback port, loaded with N items of the ARCUS seed's shape
(keys memtier-1 .. memtier-N, 50-byte values) through pipelined requests, and its RSS growth
(VmRSS from /proc) is divided by N. Servers that are not installed are skipped with a note.
cairn runs with its defaults (sync persistence, in a fresh data folder each time; the gRPC API
on a free port) unless a --cairn spec says otherwise.

RSS is read at rest: --rest seconds (2 by default) after the load, for every server alike, so
that what a burst leaves behind and a server gives back when it goes quiet is not counted
(cairn's log hands its burst buffers back after a second without writes).

The RSS is also read when half of the items are in (N/2), which splits the growth into a cost
per item (the slope between N/2 and N) and a fixed cost (what the slope does not explain: a
bounded buffer such as the gRPC watch history, filled long before N/2). At N and N/2 the store's
hash index is equally full (its tables double, and each holds N/2 / shards items at N/2), so the
slope holds no table-growth step.

For cairn the growth is broken down from its own stats: items (`bytes`, the items' bytes in
segments), index (`memory_used_bytes` less the segments' bytes: the hash index's slots), the
watch history (`stats grpc` watch_history_bytes, as the hub counts it), and the rest (allocator
and process overhead, unfilled pages of segments, what the hub's count leaves out).

usage: scripts/bytes_per_item.py [N] [--cairn LABEL=PATH [ARG ...]] ... [--rounds R] [--no-others]
  --cairn 'off=target/release/cairn --grpc-listen off'   (repeat; alternated R times, A B A B)
  default: the release build twice, gRPC on (the default, on a free port) and gRPC off.
"""

import argparse
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from server_util import free_port, wait_ready

VALUE = b"x" * 50
BATCH = 2000
SEGMENT_SIZE = 1 << 20


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def load_memcache(port, start, end):
    """Stores keys memtier-start .. memtier-(end-1), then waits for the server to have read
    them all."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        for lo in range(start, end, BATCH):
            hi = min(lo + BATCH, end)
            s.sendall(b"".join(b"set memtier-%d 0 0 50 noreply\r\n%s\r\n" % (i, VALUE) for i in range(lo, hi)))
        s.sendall(b"version\r\n")
        buf = b""
        while b"VERSION" not in buf:
            buf += s.recv(4096)


def stats(port, which=b""):
    """One `stats` block as a dict of name -> text."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"stats " + which + b"\r\n")
        buf = b""
        while not buf.endswith(b"END\r\n"):
            buf += s.recv(65536)
    out = {}
    for line in buf.split(b"\r\n"):
        parts = line.split(b" ", 2)
        if len(parts) == 3 and parts[0] == b"STAT":
            out[parts[1].decode()] = parts[2].decode()
    return out


def load_redis(port, start, end):
    with socket.create_connection(("127.0.0.1", port)) as s:
        received = [0]
        n = end - start

        def drain():
            # Every reply is "+OK\r\n": count bytes, not matches (a reply can be split
            # between two reads, and counting matches then waited forever).
            while received[0] < 5 * n:
                chunk = s.recv(1 << 16)
                if not chunk:
                    return
                received[0] += len(chunk)

        t = threading.Thread(target=drain)
        t.start()
        for lo in range(start, end, BATCH):
            hi = min(lo + BATCH, end)
            s.sendall(
                b"".join(
                    b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$50\r\n%s\r\n" % (len(k), k, VALUE)
                    for k in (b"memtier-%d" % i for i in range(lo, hi))
                )
            )
        t.join()


def measure(name, cmd, port, loader, probe, expect, n, cairn, rest):
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(port, probe, expect, proc)
        before = rss_bytes(proc.pid)
        t0 = time.time()
        half = n // 2
        loader(port, 1, half + 1)
        time.sleep(rest)
        at_half = rss_bytes(proc.pid)
        loader(port, half + 1, n + 1)
        secs = time.time() - t0 - rest
        time.sleep(rest)
        after = rss_bytes(proc.pid)
        per_item = (after - before) / n
        slope = (after - at_half) / (n - half)
        fixed = (after - before) - slope * n
        item_col = "-"
        if loader is load_memcache:
            item_col = f"{int(stats(port)['bytes']) / n:.1f}"
        print(
            f"| {name} | {n:,} | {before / 2**20:.1f} | {after / 2**20:.1f} | {per_item:.1f} | {slope:.1f} "
            f"| {fixed / 2**20:.1f} | {item_col} | {secs:.1f} |",
            flush=True,
        )
        breakdown = None
        if cairn:
            general = stats(port)
            segments = int(stats(port, b"slabs").get("1:total_pages", 0))
            grpc = stats(port, b"grpc")
            items = int(general["bytes"])
            index = int(general["memory_used_bytes"]) - segments * SEGMENT_SIZE
            history = int(grpc.get("watch_history_bytes", 0))
            rest = (after - before) - items - index - history
            breakdown = (name, [items / n, index / n, history / n, rest / n, segments])
        return per_item, breakdown
    finally:
        proc.terminate()
        proc.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=int, nargs="?", default=10_000_000)
    ap.add_argument(
        "--cairn",
        action="append",
        default=[],
        help="LABEL=PATH [ARG ...]: a cairn build and its arguments (repeat to compare)",
    )
    ap.add_argument("--rounds", type=int, default=1, help="alternate the cairn runs this many times")
    ap.add_argument("--no-others", action="store_true", help="cairn only (no memcached, redis)")
    ap.add_argument("--rest", type=float, default=2.0, help="seconds after a load before RSS is read")
    ap.add_argument("--data-parent", default=".", help="where cairn's fresh data folders go (a real disk)")
    args = ap.parse_args()
    n = args.n
    variants = []
    for spec in args.cairn or [
        "cairn=target/release/cairn --grpc-listen 127.0.0.1:{port}",
        "cairn, gRPC off=target/release/cairn --grpc-listen off",
    ]:
        label, _, rest = spec.partition("=")
        words = shlex.split(rest)
        variants.append((label, words[0], words[1:]))
    mem_mb = str(max(256, n * 400 // 2**20))
    print(
        "| server | items | RSS before (MiB) | RSS after (MiB) | bytes per item | per item (N/2 to N) "
        "| fixed (MiB) | `stats bytes` per item | load time (s) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    results = {}
    breakdowns = []
    for _ in range(args.rounds):
        for label, path, extra in variants:
            port = free_port()
            extra = [a.replace("{port}", str(free_port())) for a in extra]
            # A fresh data folder: the default server persists (sync), and must not recover
            # an earlier run's items.
            with tempfile.TemporaryDirectory(dir=args.data_parent) as data:
                per_item, breakdown = measure(
                    label,
                    [path, "-p", str(port), "-m", mem_mb, "-t", "2", "--data-dir", data, *extra],
                    port, load_memcache, b"version\r\n", b"VERSION", n, True, args.rest,
                )
            results.setdefault(label, []).append(per_item)
            breakdowns.append(breakdown)
    if not args.no_others and shutil.which("memcached"):
        port = free_port()
        results["memcached"] = [measure(
            "memcached (-t 2)",
            ["memcached", "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-m", mem_mb, "-t", "2", "-u", "root"],
            port, load_memcache, b"version\r\n", b"VERSION", n, False, args.rest,
        )[0]]
    elif not args.no_others:
        print("memcached not installed: skipped", file=sys.stderr)
    if not args.no_others and shutil.which("redis-server"):
        port = free_port()
        with tempfile.TemporaryDirectory() as d:
            results["redis"] = [measure(
                "redis-server (no persistence)",
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", d],
                port, load_redis, b"PING\r\n", b"PONG", n, False, args.rest,
            )[0]]
    elif not args.no_others:
        print("redis-server not installed: skipped", file=sys.stderr)
    print("\nWhere cairn's RSS growth went, per item (from its stats):\n")
    print("| run | items (`bytes`) | hash index | watch history (as counted) | rest | segments |")
    print("|---|---|---|---|---|---|")
    for name, (items, index, history, rest, segments) in breakdowns:
        print(f"| {name} | {items:.1f} | {index:.1f} | {history:.1f} | {rest:.1f} | {segments:,} |")
    for other in ("memcached", "redis"):
        if other in results:
            for label in (v[0] for v in variants):
                ratio = statistics.median(results[label]) / results[other][0]
                print(f"{label} / {other} bytes per item (median of its runs): {ratio:.2f}x")


if __name__ == "__main__":
    main()
