#!/usr/bin/env python3
"""ARCUS's own Java client (arcus-java-client 1.12.1) against cairn, found through ZooKeeper.

    run.py ─> Debian's ZooKeeper on a loopback port (as crates/server/tests/common/zookeeper.rs)
          ─> mvn -q -B: compile ArcusCheck.java, write its classpath (~/.m2 caches the jars)
          ─> scenario "plain": 3 cairn nodes in service S (--zookeeper Z --service-code S)
               java cairn.ArcusCheck plain Z S: every key-value call, one collection call
               (NOT_SUPPORTED, the connection kept); then every node holds some of the keys
          ─> scenario "failover": 2 nodes in replication group g0 (sync, 4 s sessions)
               java cairn.ArcusCheck failover Z S: writes in a loop; at its "KILL NOW" the
               primary is killed with kill -9 and started again (it rejoins as a replica);
               the client must write again and read back every acknowledged write

Exit 0 when every scenario passed. Without java, mvn or Debian's zookeeper it skips with a
note, except under CI (CI set), where their absence is a failure. Environment: CAIRN_BIN (the
binary; default target/debug/cairn, under $CARGO_TARGET_DIR when set), ARCUS_JAVA_SCENARIOS
(comma-separated, default "plain,failover"), ARCUS_JAVA_KEEP=1 keeps the work folder;
ARCUS_JAVA_GROUP (the group's name, default g0).
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ZOOKEEPER_JAR = "/usr/share/java/zookeeper.jar"
# The ARCUS Java client 1.12.1 drops a replication group of three or more members
# (ArcusReplNodeAddress.makeGroupAddrsList: "Too many nodes"): two here.
GROUP = os.environ.get("ARCUS_JAVA_GROUP", "g0")


def note(msg):
    print(f"arcus-java: {msg}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, predicate, timeout_s=60.0):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


class ZooKeeper:
    """Debian's ZooKeeper server on a free loopback port, 100 ms ticks."""

    def __init__(self, work):
        self.port = free_port()
        self.dir = os.path.join(work, "zookeeper")
        os.makedirs(os.path.join(self.dir, "data"))
        cfg = os.path.join(self.dir, "zoo.cfg")
        with open(cfg, "w") as f:
            f.write(
                f"tickTime=100\ndataDir={self.dir}/data\nclientPort={self.port}\n"
                "clientPortAddress=127.0.0.1\nmaxSessionTimeout=60000\n"
                "admin.enableServer=false\n4lw.commands.whitelist=ruok\n"
            )
        self.log = open(os.path.join(self.dir, "zookeeper.log"), "w")
        self.proc = subprocess.Popen(
            ["java", "-Xms16m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             "-cp", ZOOKEEPER_JAR, "org.apache.zookeeper.server.ZooKeeperServerMain", cfg],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT)
        wait_for("ZooKeeper", self.ready, 60)

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    def ready(self):
        if self.proc.poll() is not None:
            raise RuntimeError("ZooKeeper exited; see " + self.log.name)
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"ruok")
                return s.recv(16) == b"imok"
        except OSError:
            return False

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        self.log.close()


class Node:
    """One cairn process on fixed ports (a restart keeps its address and data)."""

    def __init__(self, binary, work, name, args):
        self.binary = binary
        self.name = name
        self.port = free_port()
        self.grpc_port = free_port()
        self.dir = os.path.join(work, name)
        os.makedirs(self.dir, exist_ok=True)
        self.args = args
        self.proc = None
        self.starts = 0

    @property
    def addr(self):
        return ("127.0.0.1", self.port)

    def start(self, wait=True):
        self.starts += 1
        log = open(os.path.join(self.dir, f"cairn.{self.starts}.log"), "w")
        self.proc = subprocess.Popen(
            [self.binary, "-l", "127.0.0.1", "-p", str(self.port),
             "--grpc-listen", f"127.0.0.1:{self.grpc_port}", "--data-dir",
             os.path.join(self.dir, "data"), "-m", "256", *self.args],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, text=True)
        self.listening = threading.Event()
        threading.Thread(target=self._read_stdout, args=(self.proc,), daemon=True).start()
        if wait:
            self.wait_listening()

    def _read_stdout(self, proc):
        for line in proc.stdout:
            if line.startswith("cairn listening on"):
                self.listening.set()

    def wait_listening(self, timeout_s=120):
        deadline = time.monotonic() + timeout_s
        while not self.listening.wait(0.1):
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.proc.returncode}); "
                                   f"see its log in {self.dir}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} not listening after {timeout_s} s")

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill9()

    def stats(self, group=""):
        with socket.create_connection(self.addr, timeout=10) as s:
            s.sendall(f"stats {group}\r\n".encode())
            data = b""
            while not data.endswith(b"END\r\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        out = {}
        for line in data.decode().splitlines():
            parts = line.split(" ", 2)
            if len(parts) == 3 and parts[0] == "STAT":
                out[parts[1]] = parts[2]
        return out


def prerequisites():
    missing = [t for t in ("java", "javac", "mvn") if shutil.which(t) is None]
    if not os.path.exists(ZOOKEEPER_JAR):
        missing.append("zookeeper (Debian's package)")
    return missing


def build_java(work):
    """Compiles the check with Maven and returns the java command's classpath."""
    classpath_file = os.path.join(work, "classpath.txt")
    started = time.monotonic()
    cmd = ["mvn", "-q", "-B", "-Dstyle.color=never", "-f", os.path.join(HERE, "pom.xml"),
           "compile", "dependency:build-classpath", f"-Dmdep.outputFile={classpath_file}"]
    result = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if result.returncode != 0:
        sys.stdout.write(result.stdout + result.stderr)
        raise RuntimeError(f"mvn failed ({result.returncode})")
    note(f"maven build and dependency resolution: {time.monotonic() - started:.1f} s")
    with open(classpath_file) as f:
        return os.path.join(HERE, "target", "classes") + os.pathsep + f.read().strip()


# The longest one check may run (a hung client is killed, and the scenario fails).
JAVA_TIMEOUT_S = 120


def java(classpath, work, *args):
    """The check as a process whose stdout is read line by line; its stderr (the client's
    own log) goes to a file. A watchdog kills it after JAVA_TIMEOUT_S."""
    log = open(os.path.join(work, f"java-{args[0]}.stderr.log"), "w")
    proc = subprocess.Popen(
        ["java", "-Xmx512m", "-cp", classpath, "cairn.ArcusCheck", *args],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, text=True)
    proc.timed_out = False

    def watchdog():
        if proc.poll() is None:
            proc.timed_out = True
            proc.kill()

    proc.watchdog = threading.Timer(JAVA_TIMEOUT_S, watchdog)
    proc.watchdog.daemon = True
    proc.watchdog.start()
    return proc, log


def finish(proc, log):
    proc.wait()
    proc.watchdog.cancel()
    log.close()
    if proc.timed_out:
        print(f"  FAIL the check did not end within {JAVA_TIMEOUT_S} s: killed")
    if proc.returncode != 0:
        print(f"--- the client's log ({log.name}), last lines:")
        with open(log.name) as f:
            sys.stdout.write("".join(f.readlines()[-40:]))
    return proc.returncode == 0


def scenario_plain(binary, zk, classpath, work):
    service = "arcus-java-plain"
    nodes = [Node(binary, work, f"plain{i}", ["--zookeeper", zk.address, "--service-code",
                                              service]) for i in range(3)]
    try:
        for n in nodes:
            n.start()
        proc, log = java(classpath, work, "plain", zk.address, service)
        for line in proc.stdout:
            print("  " + line.rstrip(), flush=True)
        ok = finish(proc, log)
        # The client hashed the keys over every node it found in cache_list.
        items = [int(n.stats().get("curr_items", "0")) for n in nodes]
        print(f"  items per node: {items}")
        if ok and min(items) == 0:
            print("  FAIL a node holds none of the keys: the client did not find every node")
            ok = False
        return ok
    finally:
        for n in nodes:
            n.stop()


def scenario_failover(binary, zk, classpath, work):
    service = "arcus-java-repl"
    args = ["--zookeeper", zk.address, "--service-code", service, "--replication-group",
            GROUP, "--replication", "sync", "--zookeeper-session-timeout-ms", "4000"]
    nodes = [Node(binary, work, f"repl{i}", args) for i in range(2)]
    try:
        # The first member alone is the primary; the second takes a full copy, then serves.
        for n in nodes:
            n.start()
        roles = [n.stats("replication").get("role") for n in nodes]
        print(f"  roles: {roles}")
        proc, log = java(classpath, work, "failover", zk.address, service)
        killed_at, killed = None, None
        for line in proc.stdout:
            print("  " + line.rstrip(), flush=True)
            if line.strip() == "KILL NOW" and killed_at is None:
                primary = next(n for n in nodes if n.stats("replication").get("role")
                               == "primary")
                primary.kill9()
                killed_at, killed = time.monotonic(), primary
                print(f"  (kill -9 of the primary {primary.name}; starting it again)",
                      flush=True)
                # Started again at once, so that sync writes have a replica to wait for
                # again: it rejoins as a replica once the other is elected, or, back before
                # the election, wins it itself (the term's primary holds all of its log).
                primary.start(wait=False)
        ok = finish(proc, log)
        if killed_at is None:
            print("  FAIL the check never asked for the kill")
            ok = False
        if killed:
            killed.wait_listening()
        roles = []
        for n in nodes:
            role = n.stats("replication").get("role")
            roles.append(role)
            print(f"  {n.name}: role {role}, {n.stats().get('curr_items')} items")
        if killed and sorted(roles) != ["primary", "replica"]:
            print(f"  FAIL roles {roles} after the failover: one primary and one replica wanted")
            ok = False
        return ok
    finally:
        for n in nodes:
            n.stop()


SCENARIOS = {"plain": scenario_plain, "failover": scenario_failover}


def main():
    missing = prerequisites()
    if missing:
        if os.environ.get("CI"):
            note(f"missing under CI: {', '.join(missing)}")
            return 1
        note(f"skipped: {', '.join(missing)} not installed "
             "(apt-get install default-jdk-headless maven zookeeper)")
        return 0
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    binary = os.environ.get("CAIRN_BIN", os.path.join(target, "debug", "cairn"))
    if not os.access(binary, os.X_OK):
        note(f"no cairn binary at {binary} (cargo build, or set CAIRN_BIN)")
        return 1
    chosen = os.environ.get("ARCUS_JAVA_SCENARIOS", "plain,failover").split(",")
    work = tempfile.mkdtemp(prefix="cairn-arcus-java-")
    zk = None
    passed, failed = 0, 0
    try:
        classpath = build_java(work)
        zk = ZooKeeper(work)
        for name in chosen:
            note(f"scenario {name}")
            started = time.monotonic()
            try:
                ok = SCENARIOS[name](binary, zk, classpath, work)
            except Exception as e:  # a node that did not start, a timeout
                print(f"  FAIL {type(e).__name__}: {e}")
                ok = False
            note(f"scenario {name}: {'passed' if ok else 'FAILED'} "
                 f"in {time.monotonic() - started:.1f} s")
            passed, failed = passed + ok, failed + (not ok)
    finally:
        if zk:
            zk.stop()
        if os.environ.get("ARCUS_JAVA_KEEP") or failed:
            note(f"logs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"arcus-java: {passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
