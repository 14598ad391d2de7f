"""Starts the real cairn binary on 127.0.0.1:0 for a test and stops it by its PID.

Readiness is the "cairn listening on ADDR" line (and "cairn metrics on ADDR" before it when
--metrics-addr is given), so nothing sleeps waiting for the server.
"""

import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("CAIRN_BIN", os.path.join(ROOT, "target", "debug", "cairn"))


class Cairn:
    def __init__(self, data_dir, *args, preexec_fn=None):
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
