"""cairn nodes of one replication group, and a small memcached text-protocol client.

```text
  node nK, address 10.A.B.1K in netns <prefix>-nK:
    ip netns exec <ns> cairn -p 11211 -l <ip> --grpc-listen <ip>:7000 --data-dir <dir>
        --zookeeper z1,z2,z3 --service-code <svc> --replication-group g0
        --replication sync|async --zookeeper-session-timeout-ms T ...
    stdout: a reader thread copies it to logs/nK.log and waits for "cairn listening on"
    stderr: logs/nK.log
```
"""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from .net import Net

log = logging.getLogger("faults.cairn")

PORT = 11211
GRPC_PORT = 7000


class Node:
    def __init__(
        self,
        host: str,
        ip: str,
        net: Net,
        binary: str,
        data_dir: Path,
        logdir: Path,
        args: list[str],
    ):
        self.host = host
        self.ip = ip
        self.net = net
        self.binary = binary
        self.data_dir = data_dir
        self.log_path = logdir / f"{host}.log"
        self.args = args
        self.proc: subprocess.Popen | None = None
        self.ready = threading.Event()
        self.paused = False
        # Called with the PID after each start (the slow-disk cgroup takes it).
        self.on_start = None

    @property
    def addr(self) -> tuple[str, int]:
        return (self.ip, PORT)

    @property
    def addr_text(self) -> str:
        return f"{self.ip}:{PORT}"

    @property
    def grpc(self) -> tuple[str, int]:
        return (self.ip, GRPC_PORT)

    def start(self, wait_s: float | None = 60) -> None:
        """Starts the node; with wait_s, waits that long for its `cairn listening` line."""
        assert not self.running, f"{self.host} runs already"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = self.net.exec_prefix(self.host) + [
            self.binary,
            "-p",
            str(PORT),
            "-l",
            self.ip,
            "--grpc-listen",
            f"{self.ip}:{GRPC_PORT}",
            "--data-dir",
            str(self.data_dir),
        ] + self.args
        out = open(self.log_path, "ab")
        out.write(f"--- start {time.strftime('%H:%M:%S')}: {' '.join(cmd)}\n".encode())
        out.flush()
        self.ready.clear()
        self.paused = False
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=out
        )
        proc = self.proc
        threading.Thread(
            target=self._read_stdout, args=(proc, out), name=f"{self.host}-stdout", daemon=True
        ).start()
        log.info("%s: started (pid %d)", self.host, proc.pid)
        if self.on_start:
            self.on_start(proc.pid)
        if wait_s is not None:
            self.wait_ready(wait_s)

    def _read_stdout(self, proc: subprocess.Popen, out) -> None:
        for line in proc.stdout:
            out.write(b"[stdout] " + line)
            out.flush()
            if line.startswith(b"cairn listening on"):
                self.ready.set()
        out.close()

    def wait_ready(self, wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        while not self.ready.wait(0.1):
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.host} exited ({self.proc.returncode}): see {self.log_path}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.host} not ready after {wait_s}s: see {self.log_path}")

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        if self.running:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
            log.info("%s: killed (-9)", self.host)
        self.paused = False

    def terminate(self, wait_s: float = 20) -> None:
        if self.running:
            if self.paused:
                self.cont()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(wait_s)
            except subprocess.TimeoutExpired:
                self.kill9()

    def stop(self) -> None:
        """SIGSTOP: the process pauses (a long GC, a VM stall)."""
        if self.running:
            self.proc.send_signal(signal.SIGSTOP)
            self.paused = True
            log.info("%s: paused", self.host)

    def cont(self) -> None:
        if self.running and self.paused:
            self.proc.send_signal(signal.SIGCONT)
            log.info("%s: resumed", self.host)
        self.paused = False

    def control(self, timeout: float = 1.0) -> "Conn":
        """A connection from the harness's control address (never cut by a nemesis)."""
        return Conn(self.addr, self.net.control_ip, timeout)

    def stats(self, section: str = "replication", timeout: float = 1.0) -> dict[str, str] | None:
        """`stats <section>`, or None if the node does not answer."""
        if not self.running or self.paused:
            return None
        try:
            with self.control(timeout) as c:
                return c.stats(section)
        except (OSError, ProtocolError):
            return None


class ProtocolError(Exception):
    pass


class Conn:
    """One memcached text-protocol connection with a timeout on every call."""

    def __init__(self, addr: tuple[str, int], source_ip: str | None, timeout: float,
                 connect_timeout: float | None = None):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            if source_ip:
                self.sock.bind((source_ip, 0))
            self.sock.settimeout(connect_timeout or timeout)
            self.sock.connect(addr)
            self.sock.settimeout(timeout)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            self.sock.close()
            raise
        self.buf = b""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def line(self) -> bytes:
        while b"\r\n" not in self.buf:
            d = self.sock.recv(65536)
            if not d:
                raise ConnectionError("closed by the server")
            self.buf += d
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            d = self.sock.recv(65536)
            if not d:
                raise ConnectionError("closed by the server")
            self.buf += d
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def stats(self, section: str = "") -> dict[str, str]:
        self.send(f"stats {section}\r\n".encode() if section else b"stats\r\n")
        out = {}
        while True:
            line = self.line().decode(errors="replace")
            if line == "END":
                return out
            parts = line.split(" ", 2)
            if parts[0] != "STAT" or len(parts) < 3:
                raise ProtocolError(line)
            out[parts[1]] = parts[2]

    def set(self, key: str, value: str) -> str:
        v = value.encode()
        self.send(f"set {key} 0 0 {len(v)}\r\n".encode() + v + b"\r\n")
        return self.line().decode(errors="replace")

    def delete(self, key: str) -> str:
        self.send(f"delete {key}\r\n".encode())
        return self.line().decode(errors="replace")

    def mg(self, key: str) -> str | None:
        """The value, or None if the key is absent."""
        self.send(f"mg {key} v\r\n".encode())
        return self._mg_reply()

    def _mg_reply(self) -> str | None:
        line = self.line().decode(errors="replace")
        if line == "EN":
            return None
        if line.startswith("VA "):
            n = int(line.split()[1])
            data = self.exactly(n + 2)
            return data[:-2].decode(errors="replace")
        raise ProtocolError(line)

    def mg_many(self, keys: list[str], batch: int = 100) -> dict[str, str | None]:
        """`mg KEY v` for each key, pipelined in batches."""
        out: dict[str, str | None] = {}
        for i in range(0, len(keys), batch):
            part = keys[i : i + batch]
            self.send(b"".join(f"mg {k} v\r\n".encode() for k in part))
            for k in part:
                out[k] = self._mg_reply()
        return out

    def set_many(self, items: list[tuple[str, str]], batch: int = 50) -> list[str]:
        """Pipelined sets; the replies in order."""
        replies = []
        for i in range(0, len(items), batch):
            part = items[i : i + batch]
            self.send(
                b"".join(
                    f"set {k} 0 0 {len(v.encode())}\r\n".encode() + v.encode() + b"\r\n"
                    for k, v in part
                )
            )
            for _ in part:
                replies.append(self.line().decode(errors="replace"))
        return replies
