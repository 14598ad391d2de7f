#!/usr/bin/env python3
"""Where a request's CPU goes: cairn (persistence off) and memcached, side by side.

For each server in turn (each started here on a free loopback port, -t 2), the keys are
inserted, then cairn-bench runs a load (2 threads x 25 connections by default, 50-byte
values) and, while it runs, this script counts for the server process alone:

  * CPU per op: utime + stime from /proc/PID/stat over a window, divided by the ops the
    server counted in that window (`stats`: cmd_get + cmd_set);
  * system calls per op by name, context switches per op: `perf stat` on the PID with the
    syscalls:sys_enter_* tracepoints;
  * with --record, a `perf record -g` of the same window (and a flame graph if inferno's
    `inferno-collapse-perf` and `inferno-flamegraph` are on PATH).

The load generator shares the machine's cores with the server: compare the two servers'
figures from the same run, not against another run.

    python3 scripts/profile_request_path.py --ratio 0:1 --record --out-dir bench-out/profile
"""

import argparse
import os
import re
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import time

from server_util import free_port, wait_ready

SYSCALLS = [
    "recvfrom", "sendto", "read", "write", "readv", "writev", "sendmsg", "recvmsg",
    "epoll_wait", "epoll_pwait", "epoll_ctl", "futex", "sched_yield", "io_uring_enter",
]


def stats(port):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"stats\r\n")
        buf = b""
        while not buf.endswith(b"END\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    out = {}
    for line in buf.decode().splitlines():
        parts = line.split(" ")
        if len(parts) == 3 and parts[0] == "STAT":
            out[parts[1]] = parts[2]
    return out


def ops(port):
    s = stats(port)
    return int(s["cmd_get"]) + int(s["cmd_set"])


def cpu_secs(pid):
    """(user, system) CPU seconds of a process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def start(name, args, port):
    """Starts `memcached`, `cairn` (--cairn-bin) or a LABEL=PATH cairn build."""
    if name == "memcached":
        cmd = ["memcached", "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-t", "2",
               "-m", "1024", "-c", "4096", "-u", "root"]
    else:
        # LABEL=PATH may carry arguments of its own ("uring=PATH --uring").
        binary = shlex.split(name.split("=", 1)[1]) if "=" in name else [args.cairn_bin]
        cmd = binary + ["-p", str(port), "-t", "2", "-m", "1024", "--persistence", "off"]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ready(port, proc=p)
    return p


def bench(args, port, extra):
    return [args.bench_bin, "-s", "127.0.0.1", "-p", str(port), "--threads", "2",
            "--clients", str(args.clients), "--data-size", "50", "--key-minimum", "1",
            "--key-maximum", str(args.keys), "--quiet"] + extra


def preload(args, port):
    """Sets every key of 1..--keys once (P:P over all connections), so the gets that follow hit."""
    per_client = -(-args.keys // (2 * args.clients))
    subprocess.run(bench(args, port, ["--key-pattern", "P:P", "--ratio", "1:0",
                                      "-n", str(per_client)]),
                   check=True, stdout=subprocess.DEVNULL)


def profile(name, args):
    port = free_port()
    server = start(name, args, port)
    try:
        preload(args, port)
        load = subprocess.Popen(
            bench(args, port, ["--key-pattern", "R:R", "--ratio", args.ratio,
                               "--pipeline", str(args.pipeline),
                               "--test-time", str(args.secs + 4)]),
            stdout=subprocess.DEVNULL)
        time.sleep(2)  # the load's connections are up and running (not a readiness wait)
        events = ",".join(["context-switches"] +
                          [f"syscalls:sys_enter_{c}" for c in SYSCALLS])
        ops0, cpu0 = ops(port), cpu_secs(server.pid)
        if args.no_perf:
            time.sleep(args.secs)
            perf = subprocess.CompletedProcess([], 0, "", "")
        else:
            perf = subprocess.run(["perf", "stat", "-x", ",", "-e", events, "-p",
                                   str(server.pid), "--", "sleep", str(args.secs)],
                                  capture_output=True, text=True)
        ops1, cpu1 = ops(port), cpu_secs(server.pid)
        n = max(ops1 - ops0, 1)
        counts = {}
        for line in perf.stderr.splitlines():
            f = line.split(",")
            if len(f) > 2 and f[0].strip().isdigit():
                counts[f[2].replace("syscalls:sys_enter_", "")] = int(f[0])
        load.wait()
        user, system = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
        row = {"server": name.split("=", 1)[0], "ops": n, "ops_per_s": n / args.secs,
               "cpu_us_per_op": (user + system) * 1e6 / n, "user_us_per_op": user * 1e6 / n,
               "system_us_per_op": system * 1e6 / n}
        row.update({k: v / n for k, v in counts.items() if v})
        if args.record:
            record(name, args, port, server.pid)
        return row
    finally:
        server.terminate()
        server.wait()


def record(name, args, port, pid):
    name = name.split("=", 1)[0]
    os.makedirs(args.out_dir, exist_ok=True)
    data = os.path.join(args.out_dir, f"{name}.perf.data")
    load = subprocess.Popen(
        bench(args, port, ["--key-pattern", "R:R", "--ratio", args.ratio,
                           "--pipeline", str(args.pipeline), "--test-time", str(args.secs + 4)]),
        stdout=subprocess.DEVNULL)
    time.sleep(2)
    subprocess.run(["perf", "record", "-F", "999", "-g", "-o", data, "-p", str(pid), "--",
                    "sleep", str(args.secs)], capture_output=True)
    load.wait()
    script = subprocess.run(["perf", "script", "-i", data], capture_output=True)
    if shutil.which("inferno-collapse-perf") and shutil.which("inferno-flamegraph"):
        folded = subprocess.run(["inferno-collapse-perf"], input=script.stdout,
                                capture_output=True).stdout
        with open(os.path.join(args.out_dir, f"{name}.folded"), "wb") as f:
            f.write(folded)
        svg = subprocess.run(["inferno-flamegraph", "--title", f"{name} ({args.ratio})"],
                             input=folded, capture_output=True).stdout
        with open(os.path.join(args.out_dir, f"{name}.svg"), "wb") as f:
            f.write(svg)
    report = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort",
                             "dso,symbol", "--stdio", "-g", "none", "--percent-limit", "0.7"],
                            capture_output=True, text=True).stdout
    with open(os.path.join(args.out_dir, f"{name}.report.txt"), "w") as f:
        f.write(report)
    symbols = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort",
                              "dso,symbol", "--stdio", "-g", "none"],
                             capture_output=True, text=True).stdout
    shares = breakdown(symbols)
    with open(os.path.join(args.out_dir, f"{name}.breakdown.txt"), "w") as f:
        for what, share in sorted(shares.items()):
            f.write(f"{share:5.1f}%  {what}\n")
    print(f"{name}: where the samples went", file=sys.stderr)
    for what, share in sorted(shares.items()):
        print(f"  {share:5.1f}%  {what}", file=sys.stderr)


# (category, symbol pattern), first match wins; kernel symbols and user symbols apart.
KERNEL = [
    ("kernel: scheduler, wake-ups", r"finish_task_switch|schedule|try_to_wake|ttwu|"
                                    r"_raw_spin_unlock_irqrestore|enqueue|dequeue|pick_next|"
                                    r"update_curr|select_task"),
    ("kernel: epoll", r"ep_|epoll|sock_poll|tcp_poll"),
    ("kernel: syscall entry/exit, fd lookup", r"do_syscall|entry_SYSCALL|syscall_exit|fdget|"
                                              r"fput|__x64|syscall"),
    ("kernel: TCP/IP over loopback, copies, softirq", r"."),
]
USER = [
    ("user: store (index, segments)", r"cairn_store"),
    ("user: parse + encode", r"cairn_proto"),
    ("user: allocation", r"malloc|free|realloc|_int_|tcache|RawVec|alloc::"),
    ("user: memcpy, memcmp", r"memcpy|memmove|memcmp|bcmp|memchr|memset"),
    ("user: clock reads", r"clock_gettime|vdso|Timespec|Instant|SystemTime"),
    ("user: tokio scheduler + I/O driver", r"tokio|mio|coop"),
    ("user: stats + latency", r"metrics|stats|Latency|conns"),
    ("user: connection + commands", r"cairn_server|cairn_persist"),
    ("user: libc syscall wrappers, locks", r"__send|__recv|recv|send|read|write|epoll|__libc|"
                                           r"syscall|pthread"),
    ("user: memcached", r"^memcached$"),
    ("user: libevent", r"libevent"),
    ("user: other", r"."),
]


def breakdown(report):
    """Shares of the samples by category, from `perf report --sort dso,symbol` lines."""
    shares = {}
    for line in report.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[(.)\]\s+(.*)$", line)
        if not m:
            continue
        share, dso, kind, sym = float(m.group(1)), m.group(2), m.group(3), m.group(4).strip()
        table = KERNEL if kind == "k" else USER
        for what, pattern in table:
            if re.search(pattern, sym) or re.search(pattern, dso):
                shares[what] = shares.get(what, 0.0) + share
                break
    return shares


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cairn-bin", default="target/release/cairn")
    ap.add_argument("--bench-bin", default="target/release/cairn-bench")
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--clients", type=int, default=25, help="connections per load thread")
    ap.add_argument("--ratio", default="0:1", help="set:get")
    ap.add_argument("--pipeline", type=int, default=1)
    ap.add_argument("--secs", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=1, help="alternate cairn, memcached N times")
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--out-dir", default="bench-out/profile")
    ap.add_argument("--servers", default="cairn,memcached",
                    help="comma separated: cairn, memcached, LABEL=PATH (another cairn build)")
    ap.add_argument("--no-perf", action="store_true", help="CPU and ops only (an A/B)")
    args = ap.parse_args()
    rows = []
    for _ in range(args.rounds):
        for name in args.servers.split(","):
            rows.append(profile(name, args))
            print(rows[-1], file=sys.stderr)
    cols = ["server", "ops_per_s", "cpu_us_per_op", "user_us_per_op", "system_us_per_op",
            "context-switches"] + SYSCALLS
    cols = [c for c in cols if any(c in r for r in rows)]
    print("| " + " | ".join(c + ("" if c in ("server", "ops_per_s") or "us_per_op" in c
                                 else " /op") for c in cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c, 0)
            cells.append(v if isinstance(v, str) else
                         (f"{v:,.0f}" if c == "ops_per_s" else f"{v:.2f}"))
        print("| " + " | ".join(cells) + " |")
    if args.rounds > 1:
        print(f"\nmedians of {args.rounds} rounds (alternating):\n")
        calls = [c for c in cols if c not in ("server", "ops_per_s") and "us_per_op" not in c]
        print("| server | ops/s | CPU us/op | user us/op | system us/op |"
              + "".join(f" {c} /op |" for c in calls))
        print("|---|---|---|---|---|" + "---|" * len(calls))
        for name in dict.fromkeys(r["server"] for r in rows):
            mine = [r for r in rows if r["server"] == name]
            med = {c: statistics.median(r.get(c, 0) for r in mine)
                   for c in ["ops_per_s", "cpu_us_per_op", "user_us_per_op",
                             "system_us_per_op"] + calls}
            print(f"| {name} | {med['ops_per_s']:,.0f} | {med['cpu_us_per_op']:.2f} | "
                  f"{med['user_us_per_op']:.2f} | {med['system_us_per_op']:.2f} |"
                  + "".join(f" {med[c]:.2f} |" for c in calls))

if __name__ == "__main__":
    main()
