#!/usr/bin/env python3
"""A/B of cairn server builds or settings on the gRPC API, alternating (A B A B ...), medians.

Each variant is NAME=BINARY, optionally followed by server flags after a colon,
environment settings after a second colon and (--fanout) watch_bench's layout flags after a
third, e.g.

    base=OLD/cairn  own=target/release/cairn  t1=target/release/cairn:-t 1

Every round starts each variant's server in turn (`-t 2 --persistence off` unless the flags
say otherwise), preloads 1,000 keys of 32 B, and runs `cairn-bench grpc` unary Get (closed
loop) at each --concurrency (connections min(c, 30)) for --secs seconds, with the server's
CPU per call and how long its threads were runnable but not running (waiting for a core, or
for an idle vCPU to wake; from /proc/PID/task/*/schedstat), per call and as a share of their
run time. With --call-rate R the calls are offered open loop at R a second instead
(connections min(c, 10); W2 is `--concurrency 50 --call-rate 30000`). Prints each run, then
the median per variant and the ratio to the first one.

With --fanout W, each round instead runs `watch_bench fanout ADDR w5/ W RATE SECS PID LAYOUT`
(W5: W watches on one prefix, RATE gRPC writes/s for SECS seconds; --rate, --secs; --layout
passes watch_bench's layout flags, e.g. '--streams 10 --decode lean') and
reports the writes/s reached (open loop), the delivery latency, the server's CPU per event
delivered (from the first write to the last event) and its RSS growth with one stream that
never reads.

    cargo build --release -p cairn-server -p cairn-bench
    cargo build --release -p cairn-api --example watch_bench
    python3 scripts/grpc_ab.py --rounds 2 --secs 3 A=... B=...
    python3 scripts/grpc_ab.py --fanout 1000 --rate 1000 --secs 5 A=... B=...
    # W5 with one watch a stream: --layout "--streams 1000 --connections 10"
"""

import re

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_util import free_port, wait_ready  # noqa: E402
from grpc_bench import stats_grpc  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_variant(text):
    name, rest = text.split("=", 1)
    parts = rest.split(":")
    binary = parts[0]
    flags = parts[1].split() if len(parts) > 1 and parts[1] else []
    env = dict(kv.split("=", 1) for kv in parts[2].split(",")) if len(parts) > 2 and parts[2] else {}
    layout = parts[3].split() if len(parts) > 3 else None
    return name, binary, flags, env, layout


def start(binary, flags, env):
    port, gport = free_port(), free_port()
    data = tempfile.mkdtemp(prefix="cairn-grpc-ab-")
    cmd = [binary, "-p", str(port), "-t", "2", "-m", "1024", "--data-dir", data,
           "--grpc-listen", f"127.0.0.1:{gport}", "--persistence", "off", *flags]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         env={**os.environ, **env})
    wait_ready(port)
    return p, f"127.0.0.1:{gport}", data, port


def sched(pid):
    """Nanoseconds a process's threads ran on a CPU and waited runnable for one, summed."""
    ran = waited = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                r, w, _ = f.read().split()
        except OSError:
            continue  # the thread ended
        ran, waited = ran + int(r), waited + int(w)
    return ran, waited


def bench(args, addr, pid, extra):
    ran0, waited0 = sched(pid)
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = [args.bench_bin, "grpc", "--addr", addr, "--server-pid", str(pid), "--keys",
               "1000", "--test-time", str(args.secs), "--json-out-file", f.name,
               *map(str, extra)]
        subprocess.run(cmd, check=True, capture_output=True)
        r = json.load(open(f.name))
    ran1, waited1 = sched(pid)
    lat = r["latency"]
    waited = waited1 - waited0
    return {"rps": r["ops_per_sec"], "p50": lat["p50_ms"], "p99": lat["p99_ms"],
            "avg": lat["avg_ms"], "us": r["server_cpu_us_per_op"] or 0.0,
            "wait_us": waited / 1e3 / max(r["ok"], 1),
            "wait_pct": 100 * waited / max(ran1 - ran0, 1)}


def cpu_of(pid):
    """CPU seconds (user + system) of a process, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fanout(args, addr, pid, layout):
    before = cpu_of(pid)
    out = subprocess.run([args.watch_bench, "fanout", addr, "w5/", str(args.fanout),
                          str(args.rate), str(args.secs), str(pid),
                          *(layout if layout is not None else args.layout.split())],
                         capture_output=True, text=True, check=True).stdout
    cpu = cpu_of(pid) - before
    m = re.search(r"writes in ([\d.]+) s \((\d+)/s\): (\d+) events delivered \((\d+) expected, "
                  r"(\d+) watchers short(?:, (\d+) out of order)?\); delivery ms p50 ([\d.]+) "
                  r"p90 ([\d.]+) p99 ([\d.]+) p99.9 ([\d.]+) max ([\d.]+)", out)
    if not m:
        sys.exit(f"watch_bench: {out}")
    g = [float(x) if x is not None else 0.0 for x in m.groups()]
    misordered = g.pop(5)
    # The server's CPU from the first write to the last event (without setting up the
    # streams), as watch_bench measured it; else the whole run's.
    during = re.search(r"server CPU from the first write to the last event delivered: "
                       r"([\d.]+) s", out)
    if during:
        cpu = float(during.group(1))
    own = re.search(r"this client's CPU over the same span: ([\d.]+) s", out)
    client_cores = float(own.group(1)) / g[0] if own else 0.0
    # The server's RSS growth over the writes with one stream that never reads.
    rss = re.search(r"\(([+-]\d+) KiB\)", out)
    return {"wps": g[1], "events": g[2], "short": g[4], "misordered": misordered, "p50": g[5], "p90": g[6], "p99": g[7],
            "max": g[9], "us": cpu * 1e6 / max(g[2], 1), "cores": cpu / g[0],
            "client_cores": client_cores,
            "rss_kib": float(rss.group(1)) if rss else 0.0}


def main_fanout(args, variants):
    runs = {}
    print("| round | variant | writes/s | events | short | out of order | p50 ms | p90 ms | p99 ms "
          "| max ms | server us/event | server cores | client cores | RSS +KiB (stalled stream) "
          "| ring KiB | events/response |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for rnd in range(1, args.rounds + 1):
        for name, binary, flags, env, layout in variants:
            p, addr, data, port = start(binary, flags, env)
            try:
                r = fanout(args, addr, p.pid, layout)
                st = stats_grpc(port)
                r["ring_kib"] = int(st.get("watch_history_bytes", 0)) / 1024
                r["per_response"] = int(st.get("grpc_watch_events_sent", 0)) / max(
                    int(st.get("grpc_watch_responses_sent", 0)), 1)
            finally:
                p.terminate()
                p.wait()
                shutil.rmtree(data, ignore_errors=True)
            runs.setdefault(name, []).append(r)
            print(f"| {rnd} | {name} | {r['wps']:.0f} | {r['events']:.0f} | {r['short']:.0f} "
                  f"| {r['misordered']:.0f} | {r['p50']:.2f} | {r['p90']:.2f} | {r['p99']:.2f} | {r['max']:.2f} "
                  f"| {r['us']:.2f} | {r['cores']:.2f} | {r['client_cores']:.2f} "
                  f"| {r['rss_kib']:+.0f} | {r['ring_kib']:.0f} | {r['per_response']:.2f} |",
                  flush=True)
    print("\nMedians:\n")
    print("| variant | writes/s | p50 ms | p90 ms | p99 ms | max ms | server us/event "
          "| server cores | client cores | RSS +KiB | ring KiB | events/response |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, *_ in variants:
        rs = runs[name]
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        print(f"| {name} | {med['wps']:.0f} | {med['p50']:.2f} | {med['p90']:.2f} "
              f"| {med['p99']:.2f} | {med['max']:.2f} | {med['us']:.2f} "
              f"| {med['cores']:.2f} | {med['client_cores']:.2f} | {med['rss_kib']:+.0f} "
              f"| {med['ring_kib']:.0f} | {med['per_response']:.2f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("variants", nargs="+",
                    help="NAME=BINARY[:server flags[:ENV=V,...[:watch_bench layout flags]]]")
    ap.add_argument("--bench-bin", default=os.path.join(ROOT, "target/release/cairn-bench"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--secs", type=int, default=3)
    ap.add_argument("--concurrency", default="30,300")
    ap.add_argument("--call", default="get")
    ap.add_argument("--call-rate", type=int,
                    help="calls/s offered open loop (connections min(c, 10)), not closed loop")
    ap.add_argument("--fanout", type=int, help="watch streams: run W5's fan-out instead")
    ap.add_argument("--rate", type=int, default=1000, help="writes/s offered (--fanout)")
    ap.add_argument("--layout", default="",
                    help="watch_bench fanout's layout flags (--fanout), e.g. '--streams 10'")
    ap.add_argument("--watch-bench",
                    default=os.path.join(ROOT, "target/release/examples/watch_bench"))
    args = ap.parse_args()
    variants = [parse_variant(v) for v in args.variants]
    if args.fanout:
        return main_fanout(args, variants)
    conc = [int(c) for c in args.concurrency.split(",")]
    runs = {}
    print("| round | variant | concurrent | QPS | p50 ms | p99 ms | avg ms | server us/call "
          "| runnable, not running: us/call | % of run time |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for rnd in range(1, args.rounds + 1):
        for name, binary, flags, env, _ in variants:
            p, addr, data, _ = start(binary, flags, env)
            try:
                subprocess.run([args.bench_bin, "grpc", "--addr", addr, "--keys", "1000",
                                "--preload", "-n", "1"], check=True, capture_output=True)
                for c in conc:
                    load = (["-c", c, "--connections", min(c, 10), "--rate", args.call_rate]
                            if args.call_rate else ["-c", c, "--connections", min(c, 30)])
                    r = bench(args, addr, p.pid, ["--call", args.call, *load])
                    runs.setdefault((name, c), []).append(r)
                    print(f"| {rnd} | {name} | {c} | {r['rps']:.0f} | {r['p50']:.2f} "
                          f"| {r['p99']:.2f} | {r['avg']:.2f} | {r['us']:.1f} "
                          f"| {r['wait_us']:.1f} | {r['wait_pct']:.0f} |", flush=True)
            finally:
                p.terminate()
                p.wait()
                shutil.rmtree(data, ignore_errors=True)
    print("\nMedians (ratio of QPS to the first variant):\n")
    print("| variant | concurrent | QPS | vs first | p50 ms | p99 ms | avg ms | server us/call "
          "| runnable, not running: us/call | % of run time |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    first = variants[0][0]
    for c in conc:
        base = statistics.median(r["rps"] for r in runs[(first, c)])
        for name, *_ in variants:
            rs = runs[(name, c)]
            med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
            print(f"| {name} | {c} | {med['rps']:.0f} | {med['rps'] / base:.2f} "
                  f"| {med['p50']:.2f} | {med['p99']:.2f} | {med['avg']:.2f} "
                  f"| {med['us']:.1f} | {med['wait_us']:.1f} | {med['wait_pct']:.0f} |")


if __name__ == "__main__":
    main()
