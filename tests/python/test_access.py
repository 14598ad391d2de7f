"""Who may talk to cairn: memcached's ASCII authentication (-Y) and TLS (-Z), with clients
nobody here wrote (pymemcache's tls_context, openssl s_client)."""

import os
import shutil
import socket
import ssl
import subprocess
import time

import pytest
from pymemcache.client.base import Client

from cairn_harness import BIN, Cairn


def need_openssl():
    if shutil.which("openssl") is None:
        assert not os.environ.get("CI"), "openssl missing under CI"
        pytest.skip("openssl not installed")


@pytest.fixture()
def certs(tmp_path):
    """A self-signed certificate for 127.0.0.1, made by openssl."""
    need_openssl()
    cert, key = tmp_path / "chain.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    return cert, key


def tls_context(cert):
    ctx = ssl.create_default_context(cafile=str(cert))
    ctx.check_hostname = False  # the certificate names the IP in its SAN; verified below
    return ctx


def test_pymemcache_over_tls(tmp_path, certs):
    cert, key = certs
    server = Cairn(tmp_path / "data", "-Z", "-o", f"ssl_chain_cert={cert},ssl_key={key}")
    try:
        c = Client(server.addr, tls_context=tls_context(cert), timeout=20, connect_timeout=20)
        assert c.set("k", b"over tls", noreply=False)
        assert c.get("k") == b"over tls"
        # TLS runs on tokio's engine whatever io_engine says (uring is the default on Linux).
        assert c.stats("settings")[b"io_engine"] == b"tokio"
        big = os.urandom(300_000)  # many TLS records each way
        assert c.set("big", big, noreply=False)
        assert c.get("big") == big

        # A client that speaks plain text to the TLS port gets no service.
        with socket.create_connection(server.addr, timeout=20) as plain:
            plain.sendall(b"get k\r\n")
            assert b"VALUE" not in plain.recv(4096)
        # The server closes the socket as the handshake fails, just before counting it.
        deadline = time.monotonic() + 30
        while c.stats()[b"tls_handshake_failures"] < 1:
            assert time.monotonic() < deadline, "the failed handshake was not counted"
    finally:
        assert server.stop() == 0


def test_openssl_s_client(tmp_path, certs):
    cert, key = certs
    server = Cairn(tmp_path / "data", "-Z", "--ssl-chain-cert", str(cert), "--ssl-key", str(key))
    try:
        host, port = server.addr
        out = subprocess.run(
            ["openssl", "s_client", "-connect", f"{host}:{port}", "-CAfile", str(cert),
             "-verify_return_error", "-quiet"],
            input=b"set a 0 0 2\r\nhi\r\nget a\r\nquit\r\n", capture_output=True, timeout=60,
        )
        assert out.stdout == b"STORED\r\nVALUE a 0 2\r\nhi\r\nEND\r\n", out
    finally:
        assert server.stop() == 0


def test_tls_without_certificate_refuses_to_start(tmp_path):
    proc = subprocess.run([BIN, "-p", "0", "-Z", "--data-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "enable_ssl" in proc.stderr and "ssl_chain_cert" in proc.stderr, proc.stderr


def exchange(sock, request, until=b"\r\n"):
    sock.sendall(request)
    data = b""
    while not data.endswith(until):
        chunk = sock.recv(4096)
        assert chunk, "closed"
        data += chunk
    return data


def test_ascii_auth(tmp_path):
    auth = tmp_path / "auth"
    auth.write_text("alice:s3cret\nbob:hunter2\n")
    server = Cairn(tmp_path / "data", "-Y", str(auth))
    try:
        with socket.create_connection(server.addr, timeout=20) as s:
            assert exchange(s, b"get a\r\n") == b"CLIENT_ERROR unauthenticated\r\n"
            assert exchange(s, b"version\r\n") == b"CLIENT_ERROR unauthenticated\r\n"
            # The refused set's data block is consumed, not read as a command.
            assert exchange(s, b"set x 0 0 9\r\nalice bad\r\n") == \
                b"CLIENT_ERROR authentication failure\r\n"
            assert exchange(s, b"set x 0 0 12\r\nalice s3cret\r\n") == b"STORED\r\n"
            # Authenticated: the set did not store anything, and everything works.
            assert exchange(s, b"get x\r\n") == b"END\r\n"
            assert exchange(s, b"set k 0 0 1\r\nv\r\n") == b"STORED\r\n"
        # Another connection starts unauthenticated; pymemcache then works on it.
        with socket.create_connection(server.addr, timeout=20) as s:
            assert exchange(s, b"get k\r\n") == b"CLIENT_ERROR unauthenticated\r\n"
        c = Client(server.addr, timeout=20, connect_timeout=20)
        # pymemcache's own set authenticates (the value is "user pass").
        assert c.set("auth", b"bob hunter2", noreply=False)
        assert c.get("k") == b"v"
        stats = {k.decode(): v for k, v in c.stats().items()}
        assert stats["auth_failures"] == 1, stats
    finally:
        assert server.stop() == 0
