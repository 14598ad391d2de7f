#!/usr/bin/env python3
"""Issue 14's gRPC benchmarks, side by side with the same server's memcached-text get.

W1  unary Get at 1, 10, 30, 100, 300 concurrent (ghz), beside memcached-text get at the same
    number of connections (cairn-bench), on the same server, one after the other;
W2  an offered-rate sweep of unary Get, 10K-60K requests/s (ghz --rps, 50 workers);
W3  streaming reads (StreamGet, 1,000 messages a stream, 1 or 10 keys a message) against
    unary Get, in keys read per second (ghz);
W4  100K (and 1M) records of 60 B written, then a watch with initial_state until
    initial_state_done (crates/grpc/examples/watch_bench.rs, median of 5 rounds);
W5  1,000 watchers on one prefix, 1K writes/s, delivery latency, and the server's RSS with
    one watcher that never reads (watch_bench fanout).

Every server is cairn from --cairn-bin with --persistence off (W5 also with sync), on free
loopback ports. ghz: `go install github.com/bojand/ghz/cmd/ghz@v0.121.0`. Run it under the
benchmark lock, after `cargo build --release -p cairn-server -p cairn-bench` and
`cargo build --release -p cairn-grpc --example watch_bench`:

    flock /work/bench.lock python3 scripts/grpc_bench.py --secs 10
"""

import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serverutil import free_port, wait_ready  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEY = "memtier-1"


def start(args, extra=()):
    port, gport = free_port(), free_port()
    data = tempfile.mkdtemp(prefix="cairn-grpc-bench-")
    cmd = [args.cairn_bin, "-p", str(port), "-t", "2", "-m", "2048", "--data-dir", data,
           "--grpc-listen", f"127.0.0.1:{gport}", "--persistence", "off", *extra]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ready(port, proc=None)
    return p, port, f"127.0.0.1:{gport}", data


def stop(server):
    p, _, _, data = server
    p.terminate()
    p.wait()
    shutil.rmtree(data, ignore_errors=True)


def ghz(args, addr, call, data, extra):
    cmd = [args.ghz, "--insecure", "--import-paths", os.path.join(ROOT, "proto"),
           "--proto", os.path.join(ROOT, "proto", "cairn", "v1", "kv.proto"),
           "--call", call, "-d", json.dumps(data), "-O", "json", *extra, addr]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0 and not out.stdout.strip():
        sys.exit(f"ghz failed: {' '.join(cmd)}\n{out.stderr}")
    r = json.loads(out.stdout)
    pct = {d["percentage"]: d["latency"] / 1e6 for d in r.get("latencyDistribution") or []}
    errors = sum(v for k, v in (r.get("statusCodeDistribution") or {}).items() if k != "OK")
    return {"rps": r["rps"], "p50": pct.get(50, 0), "p99": pct.get(99, 0),
            "avg": r["average"] / 1e6, "errors": errors, "count": r["count"]}


def memcached_get(args, port, clients):
    cmd = [args.bench_bin, "-s", "127.0.0.1", "-p", str(port), "-t", "1", "-c", str(clients),
           "--ratio", "0:1", "--key-minimum", "1", "--key-maximum", "1",
           "--test-time", str(args.secs), "--quiet"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    # The totals line: Totals ops/s hits/s misses/s errors avg p50 p90 p95 p99 p99.9 (ms)
    line = next(l for l in out.splitlines() if l.startswith("Totals"))
    f = line.split()
    return {"rps": float(f[1]), "avg": float(f[5]), "p50": float(f[6]), "p99": float(f[9])}


def w1_w2_w3(args):
    server = start(args)
    _, port, addr, _ = server
    try:
        subprocess.run([args.bench_bin, "-s", "127.0.0.1", "-p", str(port), "-t", "1", "-c", "1",
                        "-n", "1", "--ratio", "1:0", "--key-minimum", "1", "--key-maximum", "1",
                        "--data-size", "32", "--key-pattern", "P:P", "--quiet"],
                       check=True, capture_output=True)
        key = base64.b64encode(KEY.encode()).decode()
        dur = ["-z", f"{args.secs}s"]
        print("\n### W1: unary Get vs memcached-text get, same server (2 shared cores)\n")
        print("| concurrent | gRPC Get QPS | p50 ms | p99 ms | errors | memcached get ops/s "
              "| p50 ms | p99 ms | gRPC / memcached |")
        print("|---|---|---|---|---|---|---|---|---|")
        for c in (1, 10, 30, 100, 300):
            g = ghz(args, addr, "cairn.v1.KV.Get", {"key": key},
                    ["-c", str(c), "--connections", str(min(c, 30)), *dur])
            m = memcached_get(args, port, c)
            print(f"| {c} | {g['rps']:.0f} | {g['p50']:.2f} | {g['p99']:.2f} | {g['errors']} "
                  f"| {m['rps']:.0f} | {m['p50']:.2f} | {m['p99']:.2f} | {g['rps'] / m['rps']:.2f} |",
                  flush=True)
        print("\n### W2: offered-rate sweep, unary Get (ghz --rps, 50 workers, 2 shared cores)\n")
        print("| offered RPS | achieved RPS | p50 ms | p99 ms | avg ms | errors |")
        print("|---|---|---|---|---|---|")
        for rate in (10_000, 20_000, 30_000, 40_000, 50_000, 60_000):
            g = ghz(args, addr, "cairn.v1.KV.Get", {"key": key},
                    ["-c", "50", "--connections", "10", "--rps", str(rate), *dur])
            print(f"| {rate} | {g['rps']:.0f} | {g['p50']:.2f} | {g['p99']:.2f} | {g['avg']:.2f} "
                  f"| {g['errors']} |", flush=True)
        print("\n### W3: streaming reads vs unary, keys read per second (ghz, 30 workers, "
              "2 shared cores)\n")
        print("| call | keys/s | vs unary |")
        print("|---|---|---|")
        unary = ghz(args, addr, "cairn.v1.KV.Get", {"key": key},
                    ["-c", "30", "--connections", "10", *dur])
        print(f"| unary Get | {unary['rps']:.0f} | 1.00 |", flush=True)
        per_stream = 1000
        for keys in (1, 10):
            msgs = [{"request_id": i, "keys": [key] * keys} for i in range(1, 11)]
            g = ghz(args, addr, "cairn.v1.KV.StreamGet", msgs,
                    ["-c", "30", "--connections", "10", "--stream-call-count", str(per_stream),
                     *dur])
            rate = g["rps"] * per_stream * keys
            print(f"| StreamGet, {per_stream} messages a stream, {keys} key(s) a message "
                  f"| {rate:.0f} | {rate / unary['rps']:.2f} |", flush=True)
    finally:
        stop(server)


def watch_bench(args, *rest):
    out = subprocess.run([args.watch_bench, *map(str, rest)], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"watch_bench {rest}: {out.stdout}{out.stderr}")
    return out.stdout


def w4(args):
    print("\n### W4: initial state of 100K and 1M records (60 B values), 2 shared cores\n")
    for n in (100_000, 1_000_000):
        server = start(args)
        try:
            print(watch_bench(args, "load", server[2], "w4/", n, 60).strip())
            print(watch_bench(args, "initial", server[2], "w4/", 5).strip(), flush=True)
        finally:
            stop(server)


def w5(args):
    print("\n### W5: 1,000 watchers on one prefix, 1K writes/s, 2 shared cores\n")
    for mode in ("off", "sync"):
        server = start(args, ["--persistence", mode])
        try:
            out = watch_bench(args, "fanout", server[2], "w5/", 1000, 1000, args.secs,
                              server[0].pid)
            print(f"persistence {mode}: {out.strip()}", flush=True)
        finally:
            stop(server)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cairn-bin", default=os.path.join(ROOT, "target/release/cairn"))
    ap.add_argument("--bench-bin", default=os.path.join(ROOT, "target/release/cairn-bench"))
    ap.add_argument("--watch-bench",
                    default=os.path.join(ROOT, "target/release/examples/watch_bench"))
    ap.add_argument("--ghz", default=shutil.which("ghz") or os.path.expanduser("~/go/bin/ghz"))
    ap.add_argument("--secs", type=int, default=10, help="seconds per measurement")
    ap.add_argument("--only", default="w1,w4,w5", help="w1 (also runs W2, W3), w4, w5")
    args = ap.parse_args()
    only = args.only.split(",")
    if "w1" in only:
        w1_w2_w3(args)
    if "w4" in only:
        w4(args)
    if "w5" in only:
        w5(args)


if __name__ == "__main__":
    main()
