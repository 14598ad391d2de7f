#!/usr/bin/env python3
"""Recovery time of cairn with N items of the ARCUS seed's shape, from the log and from a snapshot.

cairn is started in the given persistence mode on a free loopback port with a fresh data
directory and loaded with keys memtier-1 .. memtier-N (50-byte values) by cairn-bench
(P:P pattern, pipelined). Then two restarts, each read from `stats persistence`:

  log:       kill -9 before any checkpoint, restart: the whole command log is replayed;
  snapshot:  `checkpoint`, SIGTERM (which checkpoints again at shutdown), restart: the
             snapshot is loaded and the few log records after it replayed.

The wall time from exec to the first answer is reported beside the server's own recovery_ms.
The checkpoint rule is raised out of the way (chkpt_interval_min_logsize) so that the first
restart really replays the whole log.

usage: scripts/recovery_bench.py [N] [--mode sync|async] [--cairn target/release/cairn]
       [--bench target/release/cairn-bench]
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

from server_util import free_port, wait_ready


def command(port, line, end):
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(line)
        buf = b""
        while not buf.endswith(end):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    return buf.decode()


def persistence_stats(port):
    out = command(port, b"stats persistence\r\n", b"END\r\n")
    stats = {}
    for line in out.splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[0] == "STAT":
            stats[parts[1]] = parts[2]
    return stats


def start(args, data_dir, port):
    cmd = [
        args.cairn, "-p", str(port), "-m", str(args.memory_mb), "--persistence", args.mode,
        "--enable-admin", "--data-dir", data_dir, "--config", os.path.join(os.path.dirname(data_dir), "cairn.toml"),
    ]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ready(port, proc=proc)
    return proc, time.monotonic() - t0


def report(label, stats, wall_s):
    ms = int(stats["recovery_ms"])
    items = int(stats["recovered_items"])
    records = int(stats["recovered_log_records"])
    rate = items / (ms / 1000) if ms else float("inf")
    print(f"| {label} | {items:,} | {records:,} | {ms:,} | {wall_s:.2f} | {rate:,.0f} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("n", nargs="?", type=int, default=10_000_000)
    ap.add_argument("--mode", default="sync", choices=["sync", "async"])
    ap.add_argument("--cairn", default="target/release/cairn")
    ap.add_argument("--bench", default="target/release/cairn-bench")
    ap.add_argument("--memory-mb", type=int, default=4096)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as root:
        data_dir = os.path.join(root, "data")
        with open(os.path.join(root, "cairn.toml"), "w") as f:
            f.write("chkpt_interval_min_logsize = 1000000\n")
        port = free_port()
        proc, _ = start(args, data_dir, port)
        threads, clients = 2, 25
        per_client = -(-args.n // (threads * clients))
        t0 = time.monotonic()
        subprocess.run(
            [
                args.bench, "-p", str(port), "--threads", str(threads), "--clients", str(clients),
                "--ratio", "1:0", "--key-pattern", "P:P", "--key-minimum", "1",
                "--key-maximum", str(args.n), "--data-size", "50", "--requests", str(per_client),
                "--pipeline", "32", "--quiet",
            ],
            check=True, stdout=subprocess.DEVNULL,
        )
        load_s = time.monotonic() - t0
        loaded = int(persistence_stats(port)["log_appended_lsn"])
        print(f"loaded {loaded:,} writes in {load_s:.1f} s ({args.mode}); cairn-bench and cairn"
              " share the 2 cores", file=sys.stderr)

        print("| recovery from | items | log records replayed | recovery_ms | exec to ready s "
              "| items/s |")
        print("|---|---|---|---|---|---|")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc, wall = start(args, data_dir, port)
        report("log only (kill -9, no checkpoint)", persistence_stats(port), wall)

        out = command(port, b"checkpoint\r\n", b"\r\n")
        if not out.startswith("OK"):
            raise RuntimeError(f"checkpoint answered {out!r}")
        proc.send_signal(signal.SIGTERM)
        if proc.wait() != 0:
            raise RuntimeError(f"cairn exited with {proc.returncode} on SIGTERM")
        proc, wall = start(args, data_dir, port)
        report("snapshot (after a checkpoint)", persistence_stats(port), wall)
        snap_mb = int(persistence_stats(port)["snapshot_bytes"]) / 2**20
        print(f"snapshot size {snap_mb:,.0f} MiB", file=sys.stderr)
        proc.send_signal(signal.SIGTERM)
        proc.wait()


if __name__ == "__main__":
    main()
