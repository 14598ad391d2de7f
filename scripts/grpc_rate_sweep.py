#!/usr/bin/env python3
"""W2 of issue 14: an open-loop sweep of offered rates on one cairn server, unary gRPC Get
beside memcached-text get of the same keys, at each rate in turn (the order alternating).

One server (`-t 2 --persistence off`, flags after --server-flags), 1,000 keys of 32 B set over
gRPC (the memcached side reads the same keys), then for each rate `cairn-bench grpc --rate R`
and `cairn-bench -P memcache_text --ratio 0:1 --rate R` for --secs seconds each, both with
--concurrency workers (gRPC: over 10 HTTP/2 connections; memcached: one connection each) on one
load-generator thread. Latency counts from each request's intended send time. Prints, per
rate and protocol, the rate reached, p50/p99 and the server's CPU per request (from /proc).

    cargo build --release -p cairn-server -p cairn-bench
    python3 scripts/grpc_rate_sweep.py --rates 10000,20000,30000,40000,50000,60000
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_util import free_port, wait_ready  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_of(pid):
    """CPU seconds (user + system) of a process, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(args, pid, cmd):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        before = cpu_of(pid)
        subprocess.run([*cmd, "--json-out-file", f.name], check=True, capture_output=True)
        cpu = cpu_of(pid) - before
        r = json.load(open(f.name))
    lat = r["latency"].get("gets", r["latency"])
    ops = r["ops_per_sec"] * r["seconds"]
    return {"rps": r["ops_per_sec"], "p50": lat["p50_ms"], "p99": lat["p99_ms"],
            "us": cpu * 1e6 / max(ops, 1), "errors": r.get("errors", 0)}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server-bin", default=os.path.join(ROOT, "target/release/cairn"))
    ap.add_argument("--bench-bin", default=os.path.join(ROOT, "target/release/cairn-bench"))
    ap.add_argument("--server-flags", default="", help="more server flags")
    ap.add_argument("--rates", default="10000,20000,30000,40000,50000,60000")
    ap.add_argument("--secs", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=100)
    args = ap.parse_args()
    port, gport = free_port(), free_port()
    data = tempfile.mkdtemp(prefix="cairn-grpc-sweep-")
    cmd = [args.server_bin, "-p", str(port), "-t", "2", "-m", "1024", "--data-dir", data,
           "--grpc-listen", f"127.0.0.1:{gport}", "--persistence", "off",
           *args.server_flags.split()]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    c = str(args.concurrency)
    try:
        wait_ready(port)
        subprocess.run([args.bench_bin, "grpc", "--addr", f"127.0.0.1:{gport}", "--keys", "1000",
                        "--preload", "-n", "1"], check=True, capture_output=True)
        print("| offered/s | protocol | reached/s | p50 ms | p99 ms | server us/request |")
        print("|---|---|---|---|---|---|")
        for i, rate in enumerate(int(r) for r in args.rates.split(",")):
            common = ["--rate", str(rate), "--test-time", str(args.secs)]
            grpc = [args.bench_bin, "grpc", "--addr", f"127.0.0.1:{gport}", "--keys", "1000",
                    "--call", "get", "-c", c, "--connections", "10", "-t", "1", *common]
            mc = [args.bench_bin, "-p", str(port), "-P", "memcache_text", "-t", "1", "-c", c,
                  "--ratio", "0:1", "--key-maximum", "999", *common]
            order = [("grpc Get", grpc), ("memcached get", mc)]
            if i % 2:
                order.reverse()
            rows = {name: run(args, p.pid, cmd) for name, cmd in order}
            for name in ("grpc Get", "memcached get"):
                r = rows[name]
                print(f"| {rate} | {name} | {r['rps']:.0f} | {r['p50']:.2f} | {r['p99']:.2f} "
                      f"| {r['us']:.1f} |", flush=True)
    finally:
        p.terminate()
        p.wait()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
