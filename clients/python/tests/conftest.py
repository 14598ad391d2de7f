"""The real cairn binary for the client's tests, and a TCP proxy that can cut the client off.

The server starts on free ports (`-p 0 --grpc-listen 127.0.0.1:0`); readiness is its
"cairn grpc listening on ADDR" and "cairn listening on ADDR" lines, so nothing sleeps waiting
for it. A restart reuses the data folder and the gRPC port, so a client's channel finds the new
process where the old one was. CAIRN_BIN names the binary (default: target/debug/cairn of the
repository).
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import threading
from typing import List, Optional

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BIN = os.environ.get("CAIRN_BIN", os.path.join(ROOT, "target", "debug", "cairn"))


class Server:
    """One cairn process on a data folder; `kill9` and `restart` keep the folder and port."""

    def __init__(self, data_dir, *args: str) -> None:
        self.data_dir = str(data_dir)
        self.args = list(args)
        self.proc: Optional[subprocess.Popen] = None
        self.grpc: Optional[str] = None
        self.memcached: Optional[str] = None
        self._spawn("127.0.0.1:0")

    def _spawn(self, grpc_listen: str) -> None:
        # A port just freed by a killed process can be refused for a moment: try a few times.
        for _ in range(50):
            proc = subprocess.Popen(
                [BIN, "-p", "0", "--data-dir", self.data_dir, "--log-segment-mb", "2",
                 "--grpc-listen", grpc_listen, *self.args],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            grpc_addr = mc_addr = None
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith("cairn grpc listening on "):
                    grpc_addr = line.strip().rsplit(" ", 1)[1]
                if line.startswith("cairn listening on "):
                    mc_addr = line.strip().rsplit(" ", 1)[1]
                    break
            if grpc_addr and mc_addr:
                # Nobody reads stderr from here on: send it nowhere rather than fill the pipe.
                threading.Thread(target=_drain, args=(proc.stderr,), daemon=True).start()
                self.proc, self.grpc, self.memcached = proc, grpc_addr, mc_addr
                return
            err = proc.stderr.read() if proc.stderr else ""
            proc.wait(timeout=30)
            if "in use" not in err:
                raise AssertionError(f"cairn exited before it was ready: {err}")
        raise AssertionError(f"cairn could not bind {grpc_listen} again")

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def restart(self) -> None:
        """Starts again on the same data folder and gRPC port (after kill9 or stop)."""
        assert self.proc is not None and self.proc.poll() is not None, "stop it first"
        self._spawn(self.grpc or "127.0.0.1:0")

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.terminate()
        return self.proc.wait(timeout=30)


def _drain(f) -> None:
    for _ in f:
        pass


class Proxy:
    """A TCP proxy in front of a server: `block()` refuses new connections (accepts and closes
    them), `cut()` closes every open one, `unblock()` lets them through again, `cut_after(n)`
    cuts once n more bytes came from the server; `target` may be changed (a restarted server
    on another port)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.blocked = False
        self._lock = threading.Lock()
        self._socks: List[socket.socket] = []
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.addr = "127.0.0.1:%d" % self._listener.getsockname()[1]
        self._closed = False
        #: Bytes from the server still to forward before a cut (None: no cut planned).
        self._cut_after: Optional[int] = None
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.blocked:
                client.close()
                continue
            host, port = self.target.rsplit(":", 1)
            try:
                upstream = socket.create_connection((host, int(port)), timeout=10)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._socks += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        try:
            while True:
                ready, _, _ = select.select([a, b], [], [], 1.0)
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        return
                    if s is b and self._cut_after is not None:
                        with self._lock:
                            left = self._cut_after
                            if left is not None:
                                self._cut_after = left - len(data)
                        if left is not None and left <= len(data):
                            a.sendall(data[:left])
                            self._cut_after = None
                            self.cut()
                            return
                    (b if s is a else a).sendall(data)
        except (OSError, ValueError):
            return
        finally:
            for s in (a, b):
                _close(s)

    def cut_after(self, nbytes: int) -> None:
        self._cut_after = nbytes

    def block(self) -> None:
        self.blocked = True

    def unblock(self) -> None:
        self.blocked = False

    def cut(self) -> None:
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            _close(s)

    def close(self) -> None:
        self._closed = True
        self.cut()
        self._listener.close()


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()


@pytest.fixture()
def server(tmp_path):
    s = Server(tmp_path / "data", "--watch-progress-notify-ms", "200")
    yield s
    if s.proc is not None and s.proc.poll() is None:
        assert s.stop() == 0, "graceful shutdown exits 0"


@pytest.fixture()
def client(server):
    from cairn import Client

    c = Client(server.grpc, timeout=20)
    yield c
    c.close()


@pytest.fixture()
def proxy(server):
    p = Proxy(server.grpc)
    yield p
    p.close()
