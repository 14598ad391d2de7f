"""Helpers shared by the benchmark scripts: a free loopback port, and waiting for a server."""

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
