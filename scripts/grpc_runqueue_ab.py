#!/usr/bin/env python3
"""W1 or W2 of issue 14, A/B between server variants, with the time the server's threads spent
waiting on a CPU run queue beside each figure.

W1 (the default): 30 workers, one call each in flight, on 30 HTTP/2 connections, closed loop.
W2 (RATE=R in the environment): R calls/s offered by 50 workers on 10 connections, open loop.
Each run starts a fresh `cairn -t 2 --persistence off -m 1024` (plus the variant's flags),
sets 1,000 keys, runs `cairn-bench grpc` for SECS and reads, from /proc/PID/task/*/schedstat,
how long the server's threads ran and how long they waited runnable for a CPU. Variants
alternate round by round; the medians close the output.

    cargo build --release -p cairn-server -p cairn-bench
    flock /work/bench.lock python3 scripts/grpc_runqueue_ab.py ROUNDS SECS \\
        "NAME=SERVER_PREFIX|SERVER_FLAGS|CLIENT_PREFIX" ...

e.g. "g1=|--grpc-threads 1|" or "pinned=taskset -c 0|--grpc-threads 1|taskset -c 1".
BIN (default target/release) holds cairn and cairn-bench.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("BIN", os.path.join(ROOT, "target/release"))
PORT, GRPC = "22921", "127.0.0.1:22951"
LOAD = (["-c", "50", "--connections", "10", "--rate", os.environ["RATE"]]
        if os.environ.get("RATE") else ["-c", "30", "--connections", "30"])


def sched(pid):
    """Per thread: (ns run on a CPU, ns waited runnable on a run queue)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                run, wait, _ = f.read().split()
        except OSError:
            continue  # the thread ended
        out[tid] = (int(run), int(wait))
    return out


def one_run(server_prefix, server_flags, client_prefix, secs):
    with tempfile.TemporaryDirectory() as d:
        with open(f"{d}/log", "w") as log:
            srv = subprocess.Popen(
                server_prefix + [f"{BIN}/cairn", "-p", PORT, "-t", "2", "--grpc-listen", GRPC,
                                 "--persistence", "off", "-m", "1024", "--data-dir", d]
                + server_flags, stdout=log, stderr=subprocess.STDOUT)
        try:
            for _ in range(200):
                with open(f"{d}/log") as f:
                    if "cairn listening" in f.read():
                        break
                if srv.poll() is not None:
                    sys.exit(f"the server exited: {open(f'{d}/log').read()}")
                time.sleep(0.05)
            subprocess.run([f"{BIN}/cairn-bench", "grpc", "--addr", GRPC, "--preload", "-n", "1"],
                           capture_output=True, check=True)
            before = sched(srv.pid)
            subprocess.run(client_prefix + [f"{BIN}/cairn-bench", "grpc", "--addr", GRPC] + LOAD
                           + ["--test-time", str(secs), "--server-pid", str(srv.pid),
                              "--json-out-file", f"{d}/o.json"], capture_output=True, check=True)
            after = sched(srv.pid)
        finally:
            srv.terminate()
            srv.wait()
        with open(f"{d}/o.json") as f:
            o = json.load(f)
    ran = sum(r - before.get(t, (0, 0))[0] for t, (r, _) in after.items()) / 1e9
    waited = sum(w - before.get(t, (0, 0))[1] for t, (_, w) in after.items()) / 1e9
    return dict(qps=o["ops_per_sec"], p50=o["latency"]["p50_ms"], p99=o["latency"]["p99_ms"],
                p999=o["latency"]["p99.9_ms"], us=o["server_cpu_us_per_op"],
                gen=o["load_generator_cpu_seconds"] / o["seconds"],
                wait_frac=waited / max(ran, 1e-9), wait_us=waited * 1e6 / max(o["ok"], 1))


def line(name, r):
    return (f"{name:10s} qps {r['qps']:8.0f} p50 {r['p50']:.3f} p99 {r['p99']:.3f} "
            f"p99.9 {r['p999']:.3f} server {r['us']:.1f} us/call, generator {r['gen']:.2f} "
            f"cores, server threads waited {r['wait_frac'] * 100:.0f}% of their run time "
            f"({r['wait_us']:.1f} us a call)")


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    rounds, secs = int(sys.argv[1]), int(sys.argv[2])
    variants = []
    for arg in sys.argv[3:]:
        name, spec = arg.split("=", 1)
        parts = (spec.split("|") + ["", ""])[:3]
        variants.append((name, *(p.split() for p in parts)))
    rows = {v[0]: [] for v in variants}
    for i in range(rounds):
        for name, sp, sf, cp in variants:
            r = one_run(sp, sf, cp, secs)
            rows[name].append(r)
            print(f"round {i} {line(name, r)}", flush=True)
    print("medians:")
    for name, rs in rows.items():
        print("  " + line(name, {k: statistics.median(r[k] for r in rs) for k in rs[0]}))


if __name__ == "__main__":
    main()
