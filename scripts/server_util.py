"""Helpers shared by the benchmark scripts and the Python-driven tests: a free loopback port,
waiting for a server, and a few lines of memcached's text protocol."""

import socket
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_ready(port, probe=b"version\r\n", expect=b"VERSION", proc=None):
    """Polls with a short backoff until the server answers `probe` with `expect` in the reply
    (not a fixed sleep). With `proc`, waits as long as that process runs (a recovery can take
    long); without, gives up after 200 tries."""
    delay = 0.01
    tries = 0
    while proc.poll() is None if proc is not None else tries < 200:
        tries += 1
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                s.sendall(probe)
                if expect in s.recv(1024):
                    return
        except OSError:
            pass
        time.sleep(delay)
        delay = min(delay * 2, 0.1)
    if proc is not None:
        raise RuntimeError(f"server exited with {proc.returncode} before it was ready")
    raise RuntimeError(f"server on {port} never became ready")


class MemcachedText:
    """A few lines of memcached's text protocol over one connection (`addr`: "HOST:PORT")."""

    def __init__(self, addr, timeout=30):
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.buf = b""

    def line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def call(self, cmd, data=None, until=None):
        """Sends a command; reads one reply line, or lines up to `until`."""
        out = cmd.encode() + b"\r\n"
        if data is not None:
            out += data + b"\r\n"
        self.sock.sendall(out)
        lines = [self.line()]
        while until is not None and lines[-1] != until:
            lines.append(self.line())
        return lines

    def stats(self, group=""):
        """`stats GROUP` as a dict of names to values (text)."""
        lines = self.call(f"stats {group}".strip(), until=b"END")[:-1]
        return {l.split(b" ")[1].decode(): l.split(b" ", 2)[2].decode() for l in lines}

    def close(self):
        self.sock.close()
