#!/usr/bin/env python3
"""Issue 16's benchmarks: nutcracker in front of 1, 2 and 3 cairn nodes against direct
connections; SYNC inserts with --replication sync as a ratio of SYNC without a replica; a
replica's lag under the seed's 5:5 load; the time from kill -9 of a group's primary to writes
accepted again. Every server runs on this machine (loopback), so they share its cores.

usage: python3 scripts/cluster_bench.py [nutcracker] [sync] [lag] [failover]
       (none: all four; SECS=8 ROUNDS=2 by default; release binaries in target/release)
"""

import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from server_util import free_port  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CAIRN = os.path.join(ROOT, "target/release/cairn")
BENCH = os.path.join(ROOT, "target/release/cairn-bench")
SECS = int(os.environ.get("SECS", "8"))
ROUNDS = int(os.environ.get("ROUNDS", "2"))
ZOOKEEPER_JAR = "/usr/share/java/zookeeper.jar"


class Cairn:
    """A cairn process on free loopback ports, ready once it printed its listening line."""

    def __init__(self, args, data_dir=None):
        self.own_dir = data_dir is None
        self.dir = data_dir or tempfile.mkdtemp(prefix="cairn-bench-")
        self.proc = subprocess.Popen(
            [CAIRN, "-p", "0", "--grpc-listen", "127.0.0.1:0", "--data-dir", self.dir] + args,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.grpc = None
        for line in self.proc.stdout:
            if line.startswith("cairn grpc listening on "):
                self.grpc = line.split()[-1]
            if line.startswith("cairn listening on "):
                self.port = int(line.split(":")[-1])
                break
        else:
            raise RuntimeError(f"cairn {args} exited before it was ready")

    def kill9(self):
        self.proc.kill()
        self.proc.wait()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


def request(port, data, end=b"\r\n", timeout=10):
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        got = b""
        while not got.endswith(end):
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        return got


def stats(port, group):
    text = request(port, f"stats {group}\r\n".encode(), b"END\r\n").decode()
    return dict(l.split(" ", 2)[1:] for l in text.splitlines() if l.startswith("STAT "))


def bench(port, ratio, secs=SECS, threads=2, clients=25, size=32):
    """cairn-bench's Totals ops/s."""
    out = subprocess.run(
        [BENCH, "-p", str(port), "--threads", str(threads), "--clients", str(clients),
         "--ratio", ratio, "--key-pattern", "R:R", "--key-maximum", "100000", "-d", str(size),
         "--test-time", str(secs), "--quiet"],
        capture_output=True, text=True, check=False)
    line = next((l for l in out.stdout.splitlines() if l.startswith("Totals")), None)
    if line is None:
        raise RuntimeError(f"no Totals line: {out.stdout}\n{out.stderr}")
    return float(line.split()[1])


def nutcracker(servers):
    d = tempfile.mkdtemp(prefix="nutcracker-")
    port = free_port()
    yml = (f"cairn:\n  listen: 127.0.0.1:{port}\n  hash: md5\n  distribution: ketama\n"
           f"  timeout: 2000\n  servers:\n")
    yml += "".join(f"   - 127.0.0.1:{p}:1 node{i}\n" for i, p in enumerate(servers))
    conf = os.path.join(d, "nutcracker.yml")
    with open(conf, "w") as f:
        f.write(yml)
    proc = subprocess.Popen(["nutcracker", "-c", conf, "-s", str(free_port()), "-o",
                             os.path.join(d, "log")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError("nutcracker exited")
            time.sleep(0.02)


def run_nutcracker():
    print(f"## nutcracker (ketama, md5) vs direct: 1:1 set:get, 2 threads x 25 connections, "
          f"32-byte values, {SECS} s per run, {ROUNDS} rounds; nodes -t 1 --persistence off")
    nodes = [Cairn(["-t", "1", "--persistence", "off", "-m", "256"]) for _ in range(3)]
    results = {}
    try:
        for r in range(ROUNDS):
            for name, n in [("direct (1 node)", 0), ("nutcracker, 1 node", 1),
                            ("nutcracker, 2 nodes", 2), ("nutcracker, 3 nodes", 3)]:
                if n == 0:
                    ops = bench(nodes[0].port, "1:1")
                else:
                    proc, port = nutcracker([x.port for x in nodes[:n]])
                    try:
                        ops = bench(port, "1:1")
                    finally:
                        proc.kill()
                        proc.wait()
                results.setdefault(name, []).append(ops)
                print(f"round {r + 1}, {name:22}: {ops:10.0f} ops/s", flush=True)
    finally:
        for x in nodes:
            x.stop()
    base = statistics.median(results["direct (1 node)"])
    for name, v in results.items():
        m = statistics.median(v)
        print(f"median {name:22}: {m:10.0f} ops/s  ({m / base:.2f}x direct)")


def run_sync():
    print(f"## SYNC inserts: --persistence sync alone vs with --replication sync and a replica "
          f"(--persistence sync, same disk): 100% set, 2 x 25 connections, 32 B, {SECS} s, "
          f"{ROUNDS} rounds")
    results = {}
    for r in range(ROUNDS):
        for name in ["no replica", "replication sync"]:
            if name == "no replica":
                p = Cairn(["--persistence", "sync"])
                servers = [p]
            else:
                p = Cairn(["--persistence", "sync", "--replication", "sync"])
                rep = Cairn(["--persistence", "sync", "--replica-of", p.grpc])
                servers = [p, rep]
                while stats(p.port, "replication").get("replicas") != "1":
                    time.sleep(0.02)
            try:
                ops = bench(p.port, "1:0")
                extra = ""
                if len(servers) > 1:
                    extra = f"  (sync_timeouts {stats(p.port, 'replication')['sync_timeouts']})"
            finally:
                for s in servers:
                    s.stop()
            results.setdefault(name, []).append(ops)
            print(f"round {r + 1}, {name:18}: {ops:10.0f} ops/s{extra}", flush=True)
    a = statistics.median(results["no replica"])
    b = statistics.median(results["replication sync"])
    print(f"median no replica {a:.0f}, replication sync {b:.0f}: ratio {b / a:.2f}")


def run_lag():
    print(f"## replica lag: primary --persistence sync (replication async) + replica, 5:5 "
          f"set:get, 2 x 25 connections, 32 B, {SECS} s; primary's stats replication every "
          f"100 ms")
    p = Cairn(["--persistence", "sync"])
    rep = Cairn(["--persistence", "sync", "--replica-of", p.grpc])
    try:
        while stats(p.port, "replication").get("replicas") != "1":
            time.sleep(0.02)
        load = subprocess.Popen(
            [BENCH, "-p", str(p.port), "--threads", "2", "--clients", "25", "--ratio", "5:5",
             "--key-pattern", "R:R", "--key-maximum", "100000", "-d", "32",
             "--test-time", str(SECS), "--quiet"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        revs, byts = [], []
        while load.poll() is None:
            s = stats(p.port, "replication")
            revs.append(int(s["lag_revisions"]))
            byts.append(int(s["lag_bytes"]))
            time.sleep(0.1)
        out = load.stdout.read()
        totals = next(l for l in out.splitlines() if l.startswith("Totals"))
        t0 = time.monotonic()
        target = int(stats(p.port, "replication")["revision"])
        while int(stats(rep.port, "replication")["applied_revision"]) < target:
            time.sleep(0.005)
        catch_up = time.monotonic() - t0
        print(f"load: {float(totals.split()[1]):.0f} ops/s; {len(revs)} samples")
        print(f"lag in revisions: median {statistics.median(revs):.0f}, "
              f"p90 {sorted(revs)[int(len(revs) * 0.9)]}, max {max(revs)}")
        print(f"lag in bytes:     median {statistics.median(byts):.0f}, "
              f"p90 {sorted(byts)[int(len(byts) * 0.9)]}, max {max(byts)}")
        print(f"after the load: the replica had every revision {catch_up * 1000:.0f} ms later")
    finally:
        p.stop()
        rep.stop()


class ZooKeeper:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="zk-bench-")
        self.port = free_port()
        cfg = os.path.join(self.dir, "zoo.cfg")
        with open(cfg, "w") as f:
            f.write(f"tickTime=100\ndataDir={self.dir}/data\nclientPort={self.port}\n"
                    "clientPortAddress=127.0.0.1\nmaxSessionTimeout=60000\n"
                    "admin.enableServer=false\n4lw.commands.whitelist=ruok\n")
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-cp", ZOOKEEPER_JAR,
             "org.apache.zookeeper.server.ZooKeeperServerMain", cfg],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while True:
            try:
                if request(self.port, b"ruok", b"imok", timeout=2) == b"imok":
                    return
            except OSError:
                pass
            time.sleep(0.05)

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def run_failover():
    session = 1000
    print(f"## failover: a group of two (--persistence sync, --replication async, "
          f"--zookeeper-session-timeout-ms {session}); a set, then once the replica holds it "
          f"and is in sync, kill -9 the primary and try a set on the replica every 5 ms until "
          f"STORED; {ROUNDS * 2} kills")
    zk = ZooKeeper()
    args = ["--zookeeper", f"127.0.0.1:{zk.port}", "--service-code", "bench",
            "--replication-group", "g", "--persistence", "sync",
            "--zookeeper-session-timeout-ms", str(session)]
    dirs = [tempfile.mkdtemp(prefix="cairn-fo-") for _ in range(2)]
    nodes = [Cairn(args, dirs[0]), None]
    nodes[1] = Cairn(args, dirs[1])
    times = []
    try:
        primary = 0
        for k in range(ROUNDS * 2):
            replica = 1 - primary
            port = nodes[replica].port
            # Only an in-sync member whose position is of the primary's log may be elected: a
            # write first, and the kill once the replica holds it and the primary lists it
            # in sync.
            request(nodes[primary].port, f"set fo 0 0 1\r\n{k % 10}\r\n".encode())
            deadline = time.monotonic() + 60
            while True:
                p = stats(nodes[primary].port, "replication")
                applied = stats(port, "replication").get("applied_revision", "0")
                if p.get("in_sync") and int(applied) >= int(p["revision"]):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("the replica never caught up and joined the in-sync set")
                time.sleep(0.02)
            t0 = time.monotonic()
            nodes[primary].kill9()
            while True:
                try:
                    if request(port, b"set fo 0 0 1\r\nx\r\n") == b"STORED\r\n":
                        break
                except OSError:
                    pass
                if time.monotonic() - t0 > 60:
                    raise RuntimeError("no primary elected within 60 s")
                time.sleep(0.005)
            took = time.monotonic() - t0
            times.append(took)
            print(f"kill {k + 1}: writes accepted again after {took * 1000:.0f} ms", flush=True)
            nodes[primary] = Cairn(args, dirs[primary])
            primary = replica
        print(f"median {statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms "
              f"(the session timeout is {session} ms)")
    finally:
        for n in nodes:
            if n is not None:
                n.stop()
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)
        zk.stop()


def main():
    which = sys.argv[1:] or ["nutcracker", "sync", "lag", "failover"]
    for w in which:
        {"nutcracker": run_nutcracker, "sync": run_sync, "lag": run_lag,
         "failover": run_failover}[w]()
        print()


if __name__ == "__main__":
    main()
