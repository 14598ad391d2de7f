"""A three-server ZooKeeper ensemble (Debian's jar), each server in its own namespace.

```text
  z1 .21  z2 .22  z3 .23      zoo.cfg: tickTime 200 ms, server.N=<ip>:2888:3888,
                              clientPort 2181 on the server's own address
  ready: every server answers `srvr` with "Mode: leader" or "Mode: follower"
```

`ruok` only says the process runs; `srvr` says whether the server is in a quorum, so the
bench polls that (both are whitelisted four-letter words).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from .net import Net

log = logging.getLogger("faults.zk")

JAR = "/usr/share/java/zookeeper.jar"
# A logging backend for slf4j, when Debian's libslf4j-java has it: the servers' logs then say
# something.
SLF4J_SIMPLE = "/usr/share/java/slf4j-simple.jar"
CLIENT_PORT = 2181
TICK_MS = 200


def four_letter(ip: str, word: str, timeout: float = 1.0) -> str:
    """A four-letter word's answer, or "" if the server does not answer."""
    try:
        with socket.create_connection((ip, CLIENT_PORT), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(word.encode())
            out = b""
            while True:
                d = s.recv(4096)
                if not d:
                    break
                out += d
            return out.decode(errors="replace")
    except OSError:
        return ""


class ZkServer:
    def __init__(self, sid: int, host: str, ip: str, net: Net, workdir: Path, logdir: Path):
        self.sid = sid
        self.host = host
        self.ip = ip
        self.net = net
        self.dir = workdir / host
        self.log_path = logdir / f"{host}.log"
        self.proc: subprocess.Popen | None = None

    def configure(self, servers: list["ZkServer"]) -> None:
        data = self.dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        (data / "myid").write_text(f"{self.sid}\n")
        lines = [
            f"tickTime={TICK_MS}",
            "initLimit=50",
            "syncLimit=5",
            f"dataDir={data}",
            f"clientPort={CLIENT_PORT}",
            f"clientPortAddress={self.ip}",
            "minSessionTimeout=400",
            "maxSessionTimeout=60000",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,stat,mntr",
            "cnxTimeout=1000",
        ]
        lines += [f"server.{s.sid}={s.ip}:2888:3888" for s in servers]
        (self.dir / "zoo.cfg").write_text("\n".join(lines) + "\n")

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None
        cp = JAR + (":" + SLF4J_SIMPLE if os.path.exists(SLF4J_SIMPLE) else "")
        cmd = self.net.exec_prefix(self.host) + [
            "java",
            "-Xms16m",
            "-Xmx192m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
            "-Dzookeeper.admin.enableServer=false",
            "-cp",
            cp,
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(self.dir / "zoo.cfg"),
        ]
        out = open(self.log_path, "ab")
        out.write(f"--- start {time.strftime('%H:%M:%S')}\n".encode())
        out.flush()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        out.close()
        log.info("%s: started (pid %d)", self.host, self.proc.pid)

    def kill(self) -> None:
        """kill -9 (a crash) and wait for it."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
            log.info("%s: killed", self.host)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def mode(self) -> str:
        """leader, follower, or "" (not serving: down, or no quorum)."""
        for line in four_letter(self.ip, "srvr").splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return ""


class Ensemble:
    def __init__(self, net: Net, workdir: Path, logdir: Path):
        self.servers = [
            ZkServer(i, f"z{i}", net.add_host(f"z{i}", 20 + i), net, workdir, logdir)
            for i in (1, 2, 3)
        ]
        for s in self.servers:
            s.configure(self.servers)

    @property
    def connect_string(self) -> str:
        return ",".join(f"{s.ip}:{CLIENT_PORT}" for s in self.servers)

    @property
    def ips(self) -> list[str]:
        return [s.ip for s in self.servers]

    def start(self, deadline_s: float = 90) -> None:
        for s in self.servers:
            s.start()
        self.wait_serving(self.servers, deadline_s)

    def wait_serving(self, servers: list[ZkServer], deadline_s: float = 90) -> None:
        """Until each of `servers` is a leader or follower (in a quorum)."""
        deadline = time.monotonic() + deadline_s
        while True:
            modes = {s.host: s.mode() for s in servers}
            if all(m in ("leader", "follower") for m in modes.values()):
                log.info("ZooKeeper serving: %s", modes)
                return
            for s in servers:
                if s.proc is not None and s.proc.poll() is not None:
                    raise RuntimeError(f"ZooKeeper {s.host} exited: see {s.log_path}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"ZooKeeper not serving after {deadline_s}s: {modes}")
            time.sleep(0.1)

    def leader(self) -> ZkServer | None:
        for s in self.servers:
            if s.mode() == "leader":
                return s
        return None

    def stop(self) -> None:
        for s in self.servers:
            s.kill()
