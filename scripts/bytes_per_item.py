#!/usr/bin/env python3
"""Resident memory per item, side by side: cairn, memcached, redis-server.

Each server is started on a free loopback port, loaded with N items of the ARCUS seed's shape
(keys memtier-1 .. memtier-N, 50-byte values) through pipelined requests, and its RSS growth
(VmRSS from /proc) is divided by N. Servers that are not installed are skipped with a note.
For the memcached-protocol servers the `bytes` stat (what the server counts as item memory:
for cairn the items' bytes in segments, without the index) is also divided by N: it does not
depend on allocator and table-growth noise, so it shows a change of layout exactly.

usage: scripts/bytes_per_item.py [N] [--cairn target/release/cairn] [--cairn-arg=--grpc-listen=off ...]
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

from serverutil import free_port, wait_ready

VALUE = b"x" * 50
BATCH = 2000


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def load_memcache(port, n):
    with socket.create_connection(("127.0.0.1", port)) as s:
        for start in range(1, n + 1, BATCH):
            end = min(start + BATCH, n + 1)
            s.sendall(b"".join(b"set memtier-%d 0 0 50 noreply\r\n%s\r\n" % (i, VALUE) for i in range(start, end)))
        s.sendall(b"version\r\n")
        buf = b""
        while b"VERSION" not in buf:
            buf += s.recv(4096)


def stats_bytes(port):
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"stats\r\n")
        buf = b""
        while not buf.endswith(b"END\r\n"):
            buf += s.recv(65536)
    for line in buf.split(b"\r\n"):
        if line.startswith(b"STAT bytes "):
            return int(line.split()[2])
    return None


def load_redis(port, n):
    with socket.create_connection(("127.0.0.1", port)) as s:
        replies = [0]

        def drain():
            buf = b""
            while replies[0] < n:
                chunk = s.recv(1 << 16)
                if not chunk:
                    return
                replies[0] += chunk.count(b"+OK\r\n")

        t = threading.Thread(target=drain)
        t.start()
        for start in range(1, n + 1, BATCH):
            end = min(start + BATCH, n + 1)
            s.sendall(
                b"".join(
                    b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$50\r\n%s\r\n" % (len(k), k, VALUE)
                    for k in (b"memtier-%d" % i for i in range(start, end))
                )
            )
        t.join()


def measure(name, cmd, port, loader, probe, expect, n):
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(port, probe, expect)
        before = rss_bytes(proc.pid)
        t0 = time.time()
        loader(port, n)
        secs = time.time() - t0
        after = rss_bytes(proc.pid)
        per_item = (after - before) / n
        item_bytes = stats_bytes(port) if loader is load_memcache else None
        item_col = f"{item_bytes / n:.1f}" if item_bytes is not None else "-"
        print(f"| {name} | {n:,} | {before / 2**20:.1f} | {after / 2**20:.1f} | {per_item:.1f} | {item_col} | {secs:.1f} |", flush=True)
        return per_item
    finally:
        proc.terminate()
        proc.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=int, nargs="?", default=10_000_000)
    ap.add_argument("--cairn", default="target/release/cairn")
    ap.add_argument("--cairn-arg", action="append", default=[], help="an extra argument for cairn (repeat)")
    args = ap.parse_args()
    n = args.n
    mem_mb = str(max(256, n * 400 // 2**20))
    print("| server | items | RSS before (MiB) | RSS after (MiB) | bytes per item | `stats bytes` per item | load time (s) |")
    print("|---|---|---|---|---|---|---|")
    results = {}
    port = free_port()
    results["cairn"] = measure(
        "cairn", [args.cairn, "-p", str(port), "-m", mem_mb, "-t", "2", *args.cairn_arg], port, load_memcache, b"version\r\n", b"VERSION", n
    )
    if shutil.which("memcached"):
        port = free_port()
        results["memcached"] = measure(
            "memcached 1.6 (-t 2)",
            ["memcached", "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-m", mem_mb, "-t", "2", "-u", "root"],
            port, load_memcache, b"version\r\n", b"VERSION", n,
        )
    else:
        print("memcached not installed: skipped", file=sys.stderr)
    if shutil.which("redis-server"):
        port = free_port()
        with tempfile.TemporaryDirectory() as d:
            results["redis"] = measure(
                "redis-server (no persistence)",
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", d],
                port, load_redis, b"PING\r\n", b"PONG", n,
            )
    else:
        print("redis-server not installed: skipped", file=sys.stderr)
    if "memcached" in results:
        print(f"\ncairn / memcached bytes per item: {results['cairn'] / results['memcached']:.2f}x")
    if "redis" in results:
        print(f"cairn / redis bytes per item: {results['cairn'] / results['redis']:.2f}x")


if __name__ == "__main__":
    main()
