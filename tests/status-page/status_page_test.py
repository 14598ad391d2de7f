#!/usr/bin/env python3
"""The status page (GET / on cairn's metrics address) in a real browser, against a real cairn
under load: Debian's headless Chromium, driven over the DevTools protocol on a pipe (no
websocket, no npm: Python's standard library only).

    cairn primary (sync persistence, a flash tier, gRPC, metrics; ports 127.0.0.1:0)
      ^  memcached text load (sets, gets, deletes, incr, touch, meta), RAM filled past -m so
      |  items move to flash, a checkpoint, `cairnctl watch` streams (when cairnctl is built)
      |  <── cairn replica (--replica-of the primary): the replication card has a replica
    chromium --headless --remote-debugging-pipe ── Page.navigate http://METRICS/
      ^  Runtime.evaluate: each chart's data-points (the page counts what it drew)
      |  Page.captureScreenshot ──> --screenshot PATH (docs/status-page.png when asked)
    this script

It checks that every chart got points (at least --min-points each: ops/s by command, hit ratio,
memory, items, log latency, checkpoints, replication lag, watch streams), that the summaries
name the replica and the checkpoint, and that the page asked for nothing but the server's own
addresses (it must work on a host with no internet). Exit 0 when all holds, 1 with the failures
listed; 2 when Chromium is not installed (scripts/test-all.sh skips then, except under CI).

Usage:
    tests/status-page/status_page_test.py [--cairn target/debug/cairn]
        [--cairnctl target/debug/cairnctl] [--chromium chromium] [--screenshot PATH]
        [--seconds 12] [--min-points 5]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from server_util import MemcachedText as Memcached  # noqa: E402
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHARTS = ["ops", "hits", "memory", "items", "log", "checkpoint", "replication", "watch"]


def log(msg):
    print(f"status page test: {msg}", flush=True)


# ---- cairn ------------------------------------------------------------------------------------

def start_cairn(binary, tmp, name, extra):
    """Starts cairn on free ports; returns the process and its addresses (its ready lines)."""
    data = os.path.join(tmp, name)
    os.makedirs(data)
    args = [binary, "-p", "0", "--data-dir", data, "--log-segment-mb", "2",
            "--grpc-listen", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0"] + extra
    proc = subprocess.Popen(args, stdout=subprocess.PIPE,
                            stderr=open(os.path.join(tmp, f"{name}.log"), "w"), text=True)
    addrs = {}
    for line in proc.stdout:
        for key, prefix in (("metrics", "cairn metrics on "), ("grpc", "cairn grpc listening on "),
                            ("memcached", "cairn listening on ")):
            if line.startswith(prefix):
                addrs[key] = line.strip()[len(prefix):]
        if "memcached" in addrs:
            break
    if set(addrs) != {"metrics", "grpc", "memcached"}:
        proc.kill()
        raise SystemExit(f"cairn ({name}) exited before it was ready (log: {tmp}/{name}.log)")
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
    return proc, addrs


def fill_past_memory(addr):
    """8 KiB values until RAM (-m 16) evicts to the flash tier."""
    mc = Memcached(addr)
    value = b"f" * 8192
    for batch in range(0, 20000, 500):
        mc.sock.sendall(b"".join(b"set fill:%d 0 0 %d noreply\r\n%s\r\n" % (k, len(value), value)
                                 for k in range(batch, batch + 500)))
        s = mc.stats()
        if int(s.get("evictions", 0)) > 0 and int(s.get("flash_items", 0)) > 0:
            return batch + 500
    raise SystemExit("filling past -m evicted nothing to flash")


def load(addr, stop, errors, filled):
    """Sets, gets (hits and misses), deletes, incr, touch and meta until `stop`: about 300
    commands a second, every second (each interval of the page has lookups and log writes)."""
    try:
        mc = Memcached(addr)
        i = 0
        while not stop.is_set():
            key = f"key:{i % 300}"
            if mc.call(f"set {key} 0 0 100", b"v" * 100) != [b"STORED"]:
                raise RuntimeError("set not stored")
            mc.call(f"get {key} miss:{i}", until=b"END")
            mc.call(f"get fill:{(i * 7919) % filled}", until=b"END")
            mc.call(f"touch {key} 0")
            mc.call("incr counter 1")
            mc.call(f"delete key:{(i + 150) % 300}")
            if mc.call(f"mg {key} v")[0].startswith(b"VA "):
                mc.line()
            i += 1
            time.sleep(0.003)
    except Exception as e:
        errors.append(f"load: {e!r}")


# ---- Chromium over the DevTools protocol on a pipe ----------------------------------------------

class Chromium:
    """Headless Chromium with --remote-debugging-pipe: it reads commands on fd 3 and writes
    answers and events on fd 4, each a JSON object ended by a NUL byte."""

    def __init__(self, binary, tmp):
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()

        def fds():
            a, b = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        # The flags the machine's notes say headless Chromium needs here: no sandbox (root),
        # and none of its own background connections (the network is closed).
        self.proc = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--hide-scrollbars", "--remote-debugging-pipe",
             f"--user-data-dir={tmp}/chromium", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(tmp, "chromium.log"), "w"), preexec_fn=fds, close_fds=False)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.buf = b""
        self.next_id = 0
        self.events = []
        self.session = None

    def send(self, method, params=None, session=True):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self.to_chrome, json.dumps(msg).encode() + b"\0")
        while True:
            r = self.read()
            if r.get("id") == self.next_id:
                if "error" in r:
                    raise RuntimeError(f"{method}: {r['error']}")
                return r.get("result", {})
            self.events.append(r)

    def read(self):
        while b"\0" not in self.buf:
            chunk = os.read(self.from_chrome, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed its pipe (see chromium.log)")
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def open(self, url, width, height):
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)
        self.session = self.send("Target.attachToTarget",
                                 {"targetId": target["targetId"], "flatten": True},
                                 session=False)["sessionId"]
        self.send("Network.enable")
        self.send("Page.enable")
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        self.send("Page.navigate", {"url": url})

    def eval(self, expression):
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        return r.get("result", {}).get("value")

    def screenshot(self, path, width):
        height = self.send("Page.getLayoutMetrics")["cssContentSize"]["height"]
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": int(height) + 1, "deviceScaleFactor": 1,
                   "mobile": False})
        data = self.send("Page.captureScreenshot", {"format": "png"})["data"]
        import base64
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def requested(self):
        return [e["params"]["request"]["url"] for e in self.events
                if e.get("method") == "Network.requestWillBeSent"]

    def close(self):
        try:
            self.send("Browser.close", session=False)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# ---- the test -------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    ap.add_argument("--cairn", default=os.environ.get("CAIRN_BIN", os.path.join(target, "debug", "cairn")))
    ap.add_argument("--cairnctl", default=os.path.join(target, "debug", "cairnctl"))
    ap.add_argument("--chromium", default="chromium")
    ap.add_argument("--screenshot", help="where to write the page's screenshot (PNG)")
    ap.add_argument("--seconds", type=float, default=12, help="how long the page runs before the checks")
    ap.add_argument("--min-points", type=int, default=5, help="points each chart must have")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = ap.parse_args()
    chromium = shutil.which(args.chromium)
    if not chromium:
        print(f"status page test: {args.chromium} not found (Debian's chromium package)")
        return 2

    started = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="cairn-status-page-test-")
    failures, errors = [], []
    stop = threading.Event()
    procs, threads, browser = [], [], None
    try:
        primary, p = start_cairn(args.cairn, tmp, "primary", [
            "-m", "16", "--persistence", "sync", "--enable-admin",
            "--flash-path", os.path.join(tmp, "cairn.flash"), "--flash-size", "32m",
            "--flash-direct-io", "false"])
        procs.append(primary)
        replica, r = start_cairn(args.cairn, tmp, "replica", ["--replica-of", p["grpc"]])
        procs.append(replica)
        log(f"primary: memcached {p['memcached']}, metrics {p['metrics']}; replica {r['memcached']}")
        filled = fill_past_memory(p["memcached"])
        mc = Memcached(p["memcached"])
        mc.call("set counter 0 0 1", b"0")
        if mc.call("checkpoint") != [b"OK"]:
            failures.append("the checkpoint admin line did not answer OK")
        if os.path.exists(args.cairnctl):
            for prefix in ("key:", ""):
                procs.append(subprocess.Popen(
                    [args.cairnctl, "--endpoint", p["grpc"], "watch", prefix],
                    stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "watch.log"), "a")))
        else:
            log(f"{args.cairnctl} not built: no watch streams (the chart still gets its zeros)")
        t = threading.Thread(target=load, args=(p["memcached"], stop, errors, filled), daemon=True)
        t.start()
        threads.append(t)

        url = f"http://{p['metrics']}/"
        browser = Chromium(chromium, tmp)
        browser.open(url, 1400, 1000)
        log(f"chromium opened {url}")
        deadline = time.monotonic() + args.seconds + 30
        time.sleep(args.seconds)
        points = {}
        while True:
            got = browser.eval("JSON.stringify(Array.from(document.querySelectorAll('.chart'))"
                               ".map(e => [e.id.replace('chart-', ''), Number(e.dataset.points)]))")
            points = dict(json.loads(got or "[]"))
            if all(points.get(c, 0) >= args.min_points for c in CHARTS) or time.monotonic() > deadline:
                break
            time.sleep(1)
        samples = browser.eval("Number(document.body.dataset.samples)")
        log(f"{samples} samples; points per chart: {points}")
        for c in CHARTS:
            if points.get(c, 0) < args.min_points:
                failures.append(f"chart {c}: {points.get(c, 0)} points (at least {args.min_points} expected)")
        replication = browser.eval("document.getElementById('now-replication').textContent") or ""
        if "primary" not in replication or "1 replica" not in replication:
            failures.append(f"the replication summary does not show a primary with its replica: {replication!r}")
        checkpoint = browser.eval("document.getElementById('now-checkpoint').textContent") or ""
        if "success" not in checkpoint:
            failures.append(f"the checkpoint summary does not show the checkpoint taken: {checkpoint!r}")
        origin = f"http://{p['metrics']}/"
        elsewhere = [u for u in browser.requested() if not u.startswith(origin)]
        if elsewhere:
            failures.append(f"the page asked for addresses other than the server's: {elsewhere}")
        if args.screenshot:
            browser.screenshot(args.screenshot, 1400)
            log(f"screenshot: {args.screenshot}")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)
        if browser is not None:
            browser.close()
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if args.keep or failures or errors:
            log(f"logs kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    failures.extend(errors)
    for f in failures:
        print(f"FAIL: {f}", flush=True)
    log(f"took {time.monotonic() - started:.1f} s")
    print(f"status-page: {0 if failures else 1} passed, {1 if failures else 0} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
