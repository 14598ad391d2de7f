"""Clients: concurrent threads that write, overwrite, delete and read a small key space through
the memcached text protocol, and record every operation.

```text
  Discovery (one thread, kazoo from the root namespace)
      polls /arcus_repl/cache_list/<svc> every 100 ms; the primary is the newest ^M^ entry
  Client k (a thread; source address .1)
      loop: pick an op: set of a shared key (35%), set of a new key of its own that no one
            writes again (20%), delete of a shared key (10%), get of a shared key (35%);
            send it to its target node
            target: the discovered primary; on a refusal or a connection error, the
            discovered primary if it changed, else the next node (rotation)
      every op -> History: start, end, op, key, value, result ok | fail | unknown, node
```

Outcomes: `ok` is a reply that says the write was done (STORED, DELETED, NOT_FOUND) or a read's
value; `fail` is certain not to have taken effect (no connection could be opened, or the node
refused the write as a replica: `SERVER_ERROR writes refused`); everything else is `unknown`
(a timeout, a closed connection, or another SERVER_ERROR such as the sync replication timeout,
whose write stays in the primary's log and may still reach the replicas).
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from dataclasses import asdict, dataclass

from .cairn import Conn, ProtocolError

log = logging.getLogger("faults.workload")

GROUP = "g0"


@dataclass
class Op:
    """One client operation as the client saw it."""

    process: str  # the client's name ("c3", "loader", "stale7")
    op: str  # set | delete | get
    key: str
    value: str | None  # set: the value written; get: the value read (None = absent)
    start: float  # seconds since the run's clock started, before the request was sent
    end: float  # after the reply (or the error) came
    result: str  # ok | fail | unknown
    node: str  # ip:port it went to
    detail: str = ""  # the reply line or the error, when not plain ok

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))


class Clock:
    """The run's clock: monotonic seconds since the bench started."""

    def __init__(self):
        self.t0 = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self.t0


class History:
    def __init__(self):
        self.ops: list[Op] = []
        self.lock = threading.Lock()

    def add(self, op: Op) -> None:
        with self.lock:
            self.ops.append(op)

    def since(self, index: int) -> list[Op]:
        with self.lock:
            return self.ops[index:]

    def __len__(self) -> int:
        with self.lock:
            return len(self.ops)


class Discovery:
    """The primary as ZooKeeper lists it (`<group>^M^<ip:port>-<host>`), polled."""

    def __init__(self, hosts: str, service: str, clock: Clock):
        from kazoo.client import KazooClient

        self.path = f"/arcus_repl/cache_list/{service}"
        self.clock = clock
        self.zk = KazooClient(
            hosts=hosts,
            timeout=10.0,
            connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 1.0},
            logger=logging.getLogger("faults.kazoo"),
        )
        self.primaries: list[str] = []  # ^M^ entries, newest first
        self.replicas: list[str] = []
        self.changes: list[tuple[float, list[str]]] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="discovery", daemon=True)

    def start(self, wait_s: float = 30) -> None:
        self.zk.start(timeout=wait_s)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.wait(0.1):
            try:
                names = self.zk.get_children(self.path)
                masters = []
                replicas = []
                for n in names:
                    if n.startswith(f"{GROUP}^M^"):
                        _, stat = self.zk.get(f"{self.path}/{n}")
                        masters.append((stat.czxid, n.split("^", 2)[2].rsplit("-", 1)[0]))
                    elif n.startswith(f"{GROUP}^S^"):
                        replicas.append(n.split("^", 2)[2].rsplit("-", 1)[0])
                masters.sort(reverse=True)
                now = [a for _, a in masters]
                if now != self.primaries:
                    self.changes.append((self.clock.now(), now))
                    log.info("ZooKeeper lists primaries %s", now)
                self.primaries = now
                self.replicas = sorted(replicas)
            except Exception as e:  # ZooKeeper unreachable: keep what was seen last
                log.debug("discovery: %s", e)

    def primary(self) -> str | None:
        p = self.primaries
        return p[0] if p else None

    def stop(self) -> None:
        if self.stopped.is_set():
            return
        self.stopped.set()
        if self.thread.is_alive():
            self.thread.join(5)
        try:
            self.zk.stop()
            self.zk.close()
        except Exception:
            pass


def parse_addr(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


class Client(threading.Thread):
    """One client thread. `pinned`: it talks to that node only (a client that can reach only
    the old primary)."""

    def __init__(
        self,
        name: str,
        keys: list[str],
        nodes: list[str],
        discovery: Discovery,
        history: History,
        clock: Clock,
        source_ip: str,
        rng: random.Random,
        op_timeout_s: float,
        connect_timeout_s: float,
        pinned: str | None = None,
        pause_s: tuple[float, float] = (0.005, 0.02),
    ):
        super().__init__(name=name, daemon=True)
        self.keys = keys
        self.nodes = nodes
        self.discovery = discovery
        self.history = history
        self.clock = clock
        self.source_ip = source_ip
        self.rng = rng
        self.op_timeout_s = op_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.pinned = pinned
        self.pause_s = pause_s
        self.halt = threading.Event()
        self.seq = 0
        self.conn: Conn | None = None
        self.target: str | None = pinned
        self.bad_target: str | None = None

    def stop(self) -> None:
        self.halt.set()

    def _choose_target(self) -> str:
        if self.pinned:
            return self.pinned
        found = self.discovery.primary()
        if self.target is None:
            return found or self.rng.choice(self.nodes)
        if self.bad_target == self.target:
            # The target failed: the discovered primary if it is another node, else rotate.
            if found and found != self.target:
                return found
            i = self.nodes.index(self.target) if self.target in self.nodes else -1
            return self.nodes[(i + 1) % len(self.nodes)]
        if found and found != self.target and self.rng.random() < 0.2:
            # ZooKeeper names another primary: move there (not all at once).
            return found
        return self.target

    def _drop_conn(self) -> None:
        if self.conn:
            self.conn.close()
        self.conn = None

    def run(self) -> None:
        while not self.halt.is_set():
            target = self._choose_target()
            if target != self.target:
                self._drop_conn()
                self.target = target
            self.bad_target = None
            r = self.rng.random()
            key = self.rng.choice(self.keys)
            if r < 0.35:
                self.seq += 1
                self.one("set", key, f"{self.name}.{self.seq}")
            elif r < 0.55:
                # A key of its own, written once: lost if it is not there at the end, whatever
                # the others did (an overwrite of a shared key can hide a lost write).
                self.seq += 1
                self.one("set", f"{self.name}.u{self.seq}", f"{self.name}.{self.seq}")
            elif r < 0.65:
                self.one("delete", key, None)
            else:
                self.one("get", key, None)
            if self.bad_target:
                self.halt.wait(0.05)
            else:
                self.halt.wait(self.rng.uniform(*self.pause_s))
        self._drop_conn()

    def one(self, op: str, key: str, value: str | None) -> None:
        start = self.clock.now()
        result, detail, read = "unknown", "", None
        sent = False
        try:
            if self.conn is None:
                try:
                    self.conn = Conn(
                        parse_addr(self.target),
                        self.source_ip,
                        self.op_timeout_s,
                        self.connect_timeout_s,
                    )
                except OSError as e:
                    result, detail = "fail", f"connect: {e}"
                    raise
            sent = True
            if op == "set":
                reply = self.conn.set(key, value)
                result = "ok" if reply == "STORED" else classify(reply)
                detail = "" if result == "ok" else reply
            elif op == "delete":
                reply = self.conn.delete(key)
                result = "ok" if reply in ("DELETED", "NOT_FOUND") else classify(reply)
                detail = "" if reply == "DELETED" else reply
            else:
                read = self.conn.mg(key)
                result = "ok"
        except (OSError, ProtocolError, ValueError) as e:
            if sent:
                result, detail = ("fail" if op == "get" else "unknown"), f"{type(e).__name__}: {e}"
            self._drop_conn()
            self.bad_target = self.target
        if result != "ok" and op != "get" and detail.startswith("SERVER_ERROR"):
            # A SERVER_ERROR may be followed by a close; start again on a new connection.
            self._drop_conn()
            self.bad_target = self.target
        end = self.clock.now()
        self.history.add(
            Op(self.name, op, key, value if op != "get" else read, start, end, result,
               self.target, detail)
        )


def classify(reply: str) -> str:
    """The outcome of a write's reply that is not a success."""
    if reply.startswith("SERVER_ERROR writes refused"):
        return "fail"
    return "unknown"


def load(
    node_addr: str,
    items: list[tuple[str, str]],
    history: History,
    clock: Clock,
    source_ip: str,
    timeout_s: float,
) -> int:
    """Writes `items` to the primary, pipelined, each recorded as an op of the "loader"
    process (they are acknowledged writes like any other). Returns how many were STORED."""
    stored = 0
    with Conn(parse_addr(node_addr), source_ip, timeout_s) as c:
        for i in range(0, len(items), 50):
            part = items[i : i + 50]
            start = clock.now()
            replies = c.set_many(part, batch=50)
            end = clock.now()
            for (k, v), reply in zip(part, replies):
                result = "ok" if reply == "STORED" else classify(reply)
                stored += result == "ok"
                history.add(Op("loader", "set", k, v, start, end, result, node_addr,
                               "" if result == "ok" else reply))
    return stored


def stop_clients(clients: list[Client], wait_s: float = 10) -> None:
    for c in clients:
        c.stop()
    deadline = time.monotonic() + wait_s
    for c in clients:
        c.join(max(0.1, deadline - time.monotonic()))
