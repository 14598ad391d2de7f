#!/usr/bin/env python3
"""Fairness: the latency of a light client (one connection, one request at a time) alone and
beside a heavy one (connections pipelining 64 requests each, as fast as they are answered),
for cairn builds and memcached, alternating.

With connections pinned to worker threads (no work stealing), a heavy connection shares its
thread with the light one: this shows what the light one then waits. Each server is started
with -t 2; the light connection is the last one opened, so with round-robin dispatch it
shares a thread with half of the heavy ones.

    python3 scripts/fairness.py --rounds 3 --secs 5
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from profile_request_path import free_port, preload, start  # noqa: E402


def light(args, port):
    """Runs the light client; returns its (p50, p99) in ms."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    subprocess.run([args.bench_bin, "-s", "127.0.0.1", "-p", str(port), "--threads", "1",
                    "--clients", "1", "--data-size", "50", "--key-minimum", "1",
                    "--key-maximum", str(args.keys), "--quiet", "--key-pattern", "R:R",
                    "--ratio", "1:9", "--test-time", str(args.secs), "--json-out-file", path],
                   check=True, stdout=subprocess.DEVNULL)
    with open(path) as f:
        lat = json.load(f)["latency"]["all"]
    os.unlink(path)
    return lat["p50_ms"], lat["p99_ms"]


def run(name, args):
    port = free_port()
    server = start(name, args, port)
    try:
        preload(args, port)
        alone = light(args, port)
        heavy = subprocess.Popen(
            [args.bench_bin, "-s", "127.0.0.1", "-p", str(port), "--threads", "1",
             "--clients", str(args.heavy_clients), "--data-size", "50", "--key-minimum", "1",
             "--key-maximum", str(args.keys), "--quiet", "--key-pattern", "R:R",
             "--ratio", "1:9", "--pipeline", "64", "--test-time", str(args.secs + 3)],
            stdout=subprocess.DEVNULL)
        time.sleep(1)  # the heavy connections are open and busy (not a readiness wait)
        beside = light(args, port)
        heavy.wait()
        return {"server": name.split("=", 1)[0], "alone_p50": alone[0], "alone_p99": alone[1],
                "beside_p50": beside[0], "beside_p99": beside[1]}
    finally:
        server.terminate()
        server.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cairn-bin", default="target/release/cairn")
    ap.add_argument("--bench-bin", default="target/release/cairn-bench")
    ap.add_argument("--servers", default="cairn,memcached",
                    help="comma separated: cairn, memcached, LABEL=PATH (another cairn build)")
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--clients", type=int, default=25, help="connections per thread (insert)")
    ap.add_argument("--heavy-clients", type=int, default=4)
    ap.add_argument("--secs", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rows = []
    for _ in range(args.rounds):
        for name in args.servers.split(","):
            rows.append(run(name, args))
            print(rows[-1], file=sys.stderr)
    print(f"light client (1 connection, 1:9) alone and beside {args.heavy_clients} connections "
          f"pipelining 64, {args.secs} s, medians of {args.rounds} alternating rounds (ms):\n")
    print("| server | p50 alone | p99 alone | p50 beside | p99 beside |")
    print("|---|---|---|---|---|")
    for name in dict.fromkeys(r["server"] for r in rows):
        m = {k: statistics.median(r[k] for r in rows if r["server"] == name)
             for k in ("alone_p50", "alone_p99", "beside_p50", "beside_p99")}
        print(f"| {name} | {m['alone_p50']:.3f} | {m['alone_p99']:.3f} | "
              f"{m['beside_p50']:.3f} | {m['beside_p99']:.3f} |")


if __name__ == "__main__":
    main()
