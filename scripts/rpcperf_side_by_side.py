#!/usr/bin/env python3
"""cairn (persistence off) beside memcached under rpc-perf, a load generator nobody here wrote.

memtier_benchmark is not packaged for Debian 12 and cannot be fetched here (only the package
registries are reachable). Twitter's rpc-perf 2.0.3 is on crates.io; it needs two changes to
build with today's compiler, made by hand in a copy (not in this repo):

    cp -r ~/.cargo/registry/src/*/rpc-perf-2.0.3 rpc-perf   # after `cargo info rpc-perf`
    cp -r ~/.cargo/registry/src/*/tic-0.1.10 tic            # after `cargo info tic@0.1.10`
    # tic: drop the `waterfall` dependency (every version is yanked) and its two PNG calls;
    # rpc-perf: getopts "=0.2.14" -> "0.2" (0.2.14 no longer compiles), and
    #   [patch.crates-io] tic = { path = "../tic" }
    cd rpc-perf && cargo build --release

rpc-perf's workloads are rate-limited request generators feeding connections that keep one
request in flight each (mio, one event loop per thread). For each server in turn, `--rounds`
times (the order rotating each round), this script runs a get:set workload at fixed rates
(`--get-rate`, `--set-rate`), so both servers are offered the same load, and reports:

  * the server's CPU per op: utime + stime from /proc/PID/stat over the windows, divided by
    the ops the server itself counted (`stats`: cmd_get + cmd_set) over the same span;
  * what rpc-perf saw: the rate it got and its latency percentiles (medians over windows).

Keys are random 3-character strings (238,328 of them), values 50 bytes. Before the measured
load, `--prefill-secs` of sets alone fill most of the keyspace, so that most gets hit (the
hit rate is in the table).

    python3 scripts/rpcperf_side_by_side.py --rpc-perf /path/to/rpc-perf --rounds 3 \\
        --servers "cairn=target/release/cairn,memcached"
"""

import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

from profile_request_path import cpu_secs, ops, start
from server_util import free_port

CONFIG = """[general]
threads = {threads}
connections = {connections}
duration = {secs}
windows = {windows}
protocol = "memcache"
tcp-nodelay = true
request_timeout = 2000
connect_timeout = 2000

[[workload]]
name = "get"
method = "get"
rate = {get_rate}
  [[workload.parameter]]
  style = "random"
  size = 3
  regenerate = true

[[workload]]
name = "set"
method = "set"
rate = {set_rate}
  [[workload.parameter]]
  style = "random"
  size = 3
  regenerate = true
  [[workload.parameter]]
  style = "random"
  size = 50
  regenerate = false
"""

PCT = re.compile(r"Percentiles: Response OK \(us\): min: \d+ p50: (\d+) p90: (\d+) p99: (\d+) "
                 r"p999: (\d+)")
RATE = re.compile(r"Rate: ([\d.]+) rps Success: ([\d.]+) % Hit Rate: ([\d.]+) %")


def run_one(name, args, config_path):
    port = free_port()
    server = start(name, args, port)
    try:
        if args.prefill_secs:
            # Sets alone first, so that the measured gets mostly hit (at 100K sets/s, 10 s
            # leave ~98% of the 238,328 keys set).
            subprocess.run([args.rpc_perf, "-s", f"127.0.0.1:{port}", "--config",
                            config_path + ".prefill"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=True)
        cmd = [args.rpc_perf, "-s", f"127.0.0.1:{port}", "--config", config_path]
        load = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        # rpc-perf connects, then warms up for one window before its measured windows: the
        # server's counters are read from then on (a span, not a readiness wait).
        time.sleep(args.secs + 1)
        ops0, cpu0, t0 = ops(port), cpu_secs(server.pid), time.monotonic()
        out, _ = load.communicate(timeout=args.secs * (args.windows + 4) + 30)
        ops1, cpu1, t1 = ops(port), cpu_secs(server.pid), time.monotonic()
        n = max(ops1 - ops0, 1)
        user, system = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
        pcts = [tuple(int(x) for x in m.groups()) for m in PCT.finditer(out)]
        rates = [tuple(float(x) for x in m.groups()) for m in RATE.finditer(out)]
        if not pcts or not rates:
            sys.stderr.write(out)
            raise RuntimeError(f"{name}: no windows in rpc-perf's output")
        med = lambda i, xs: statistics.median(x[i] for x in xs)  # noqa: E731
        return {
            "server": name.split("=", 1)[0],
            "server_ops_per_s": n / (t1 - t0),
            "cpu_us_per_op": (user + system) * 1e6 / n,
            "rpcperf_rps": med(0, rates),
            "success_pct": med(1, rates),
            "hit_pct": med(2, rates),
            "p50_us": med(0, pcts),
            "p90_us": med(1, pcts),
            "p99_us": med(2, pcts),
            "p999_us": med(3, pcts),
        }
    finally:
        server.terminate()
        server.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rpc-perf", required=True, help="the rpc-perf binary")
    ap.add_argument("--cairn-bin", default="target/release/cairn")
    ap.add_argument("--servers", default="cairn,memcached",
                    help="comma separated: cairn, memcached, LABEL=PATH")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--connections", type=int, default=25, help="per rpc-perf thread")
    ap.add_argument("--get-rate", type=int, default=54000)
    ap.add_argument("--set-rate", type=int, default=6000)
    ap.add_argument("--secs", type=int, default=5, help="seconds per rpc-perf window")
    ap.add_argument("--windows", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--prefill-secs", type=int, default=10,
                    help="seconds of sets alone (100K/s offered) before the measured load")
    args = ap.parse_args()
    rows = {}
    with tempfile.TemporaryDirectory() as d:
        config = os.path.join(d, "load.toml")
        with open(config, "w") as f:
            f.write(CONFIG.format(threads=args.threads, connections=args.connections,
                                  secs=args.secs, windows=args.windows,
                                  get_rate=args.get_rate, set_rate=args.set_rate))
        with open(config + ".prefill", "w") as f:
            f.write(CONFIG.format(threads=args.threads, connections=args.connections,
                                  secs=max(args.prefill_secs, 1), windows=1, get_rate=1,
                                  set_rate=100000))
        servers = args.servers.split(",")
        for r in range(args.rounds):
            # The order turns each round (A B C, B C A, ...): whichever server ran second in a
            # round did better in 5 of 6 rounds when the order was fixed
            # (docs/decisions/0006-a-gated-yield-after-each-turn.md).
            shift = r % len(servers)
            for name in servers[shift:] + servers[:shift]:
                row = run_one(name, args, config)
                print(f"round {r + 1}: {row}", file=sys.stderr)
                rows.setdefault(row["server"], []).append(row)
    keys = ["server_ops_per_s", "cpu_us_per_op", "rpcperf_rps", "hit_pct", "p50_us", "p90_us",
            "p99_us", "p999_us"]
    print(f"rpc-perf: {args.threads} threads x {args.connections} connections, get {args.get_rate}/s"
          f" + set {args.set_rate}/s offered, {args.windows} windows of {args.secs} s, medians of"
          f" {args.rounds} round(s)\n")
    print("| server | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for server, rs in rows.items():
        cells = [f"{statistics.median(x[k] for x in rs):,.2f}" for k in keys]
        print(f"| {server} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
