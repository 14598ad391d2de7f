"""Starts the real cairn binary on 127.0.0.1:0 for a test and stops it by its PID.

Readiness is the "cairn listening on ADDR" line (and "cairn metrics on ADDR" before it when
--metrics-addr is given), so nothing sleeps waiting for the server.
"""

import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("CAIRN_BIN", os.path.join(ROOT, "target", "debug", "cairn"))


# CAIRN_TEST_IO_ENGINE=X runs every server of the suite on that connection engine (uring is
# the default on Linux; scripts/test-all.sh runs test_pymemcache.py again with tokio); not for
# TLS servers (tokio only).
IO_ENGINE = os.environ.get("CAIRN_TEST_IO_ENGINE")


def _uring_available():
    """Whether io_uring_setup (system call 425) works here; some containers forbid it."""
    import ctypes
    params = ctypes.create_string_buffer(120)  # struct io_uring_params
    fd = ctypes.CDLL(None, use_errno=True).syscall(425, 8, params)
    if fd < 0:
        return False
    os.close(fd)
    return True


if IO_ENGINE == "uring" and not _uring_available():
    import sys
    print("CAIRN_TEST_IO_ENGINE=uring ignored: io_uring is not available here", file=sys.stderr)
    IO_ENGINE = None


class Cairn:
    def __init__(self, data_dir, *args, preexec_fn=None):
        if IO_ENGINE and "-Z" not in args and "--enable-ssl" not in args:
            args = ("--io-engine", IO_ENGINE, *args)
        self.proc = subprocess.Popen(
            # The gRPC API on a free port: its default one may be another server's.
            [BIN, "-p", "0", "--data-dir", str(data_dir), "--log-segment-mb", "2",
             *([] if "--grpc-listen" in args else ["--grpc-listen", "127.0.0.1:0"]), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            preexec_fn=preexec_fn,
        )
        self.addr = None
        self.metrics = None
        for line in self.proc.stdout:
            if line.startswith("cairn metrics on "):
                host, port = line.strip().rsplit(" ", 1)[1].rsplit(":", 1)
                self.metrics = (host, int(port))
            if line.startswith("cairn listening on "):
                host, port = line.strip().rsplit(" ", 1)[1].rsplit(":", 1)
                self.addr = (host, int(port))
                break
        assert self.addr, "cairn exited before it was ready"

    def cpu_seconds(self):
        """User + system CPU time the server process has used, from /proc."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        """SIGTERM, then the exit code of the graceful shutdown."""
        self.proc.terminate()
        return self.proc.wait(timeout=30)
