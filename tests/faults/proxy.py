"""A small TCP proxy that can delay, throttle and cut: the bench's slow and lossy links.

`tc netem` is not in this kernel, so a link that must be slow passes through one of these.
Each node's nftables DNAT sends its connections to another node's gRPC port (replication:
a replica follows its primary there) to the proxy of that ordered pair, in the root
namespace:

```text
  n2 (replica) ──DNAT n1:7000 -> .2:P(n2->n1)──> Link(n2->n1) ──from .2──> n1:7000 (primary)
                                                 delay_s: each chunk leaves delay_s after it
                                                          arrived (order kept)
                                                 rate_bps: at most this many bytes a second,
                                                           each direction of each connection
                                                 reset_per_s: the chance per second that a
                                                           connection is cut (RST both ends)
```

Every link runs on one asyncio loop in a thread of its own; settings change live
(`Link.set`) and apply to the next chunk.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time

log = logging.getLogger("faults.proxy")

CHUNK = 16 * 1024


class Link:
    """One listening port forwarding to one target."""

    def __init__(self, name: str, listen_ip: str, target: tuple[str, int], rng: random.Random):
        self.name = name
        self.listen_ip = listen_ip
        self.target = target
        self.rng = rng
        self.port = 0
        self.delay_s = 0.0
        self.rate_bps = 0
        self.reset_per_s = 0.0
        # open connections: (client writer, upstream writer)
        self.conns: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self.accepted = 0
        self.server: asyncio.base_events.Server | None = None

    def set(self, delay_s: float = 0.0, rate_bps: int = 0, reset_per_s: float = 0.0) -> None:
        self.delay_s, self.rate_bps, self.reset_per_s = delay_s, rate_bps, reset_per_s

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._accept, self.listen_ip, 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            up_r, up_w = await asyncio.wait_for(
                asyncio.open_connection(*self.target, local_addr=(self.listen_ip, 0)), 5
            )
        except (OSError, asyncio.TimeoutError):
            writer.transport.abort()
            return
        pair = (writer, up_w)
        self.conns.add(pair)
        tasks = [
            asyncio.ensure_future(self._pump(reader, up_w)),
            asyncio.ensure_future(self._pump(up_r, writer)),
            asyncio.ensure_future(self._chaos(pair)),
        ]
        await asyncio.wait(tasks[:2], return_when=asyncio.FIRST_COMPLETED)
        for t in tasks:
            t.cancel()
        self.conns.discard(pair)
        for w in pair:
            w.transport.abort()

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        """Copies src to dst: each chunk is held until it arrived + delay_s, and the rate is
        kept by sleeping after each chunk."""
        queue: asyncio.Queue = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                if data is None:
                    return
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                dst.write(data)
                await dst.drain()
                if self.rate_bps:
                    await asyncio.sleep(len(data) / self.rate_bps)

        sender = asyncio.ensure_future(deliver())
        try:
            while True:
                size = CHUNK
                if self.rate_bps:
                    size = max(512, min(CHUNK, self.rate_bps // 20))
                data = await src.read(size)
                if not data:
                    break
                await queue.put((time.monotonic() + self.delay_s, data))
                # Backpressure: do not read far ahead of what was delivered.
                while queue.qsize() > 64:
                    await asyncio.sleep(0.005)
            await queue.put((0, None))
            await sender
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            sender.cancel()

    async def _chaos(self, pair) -> None:
        while True:
            await asyncio.sleep(0.1)
            if self.reset_per_s and self.rng.random() < self.reset_per_s * 0.1:
                log.debug("%s: cutting a connection", self.name)
                for w in pair:
                    w.transport.abort()
                return

    def cut_all(self) -> None:
        for pair in list(self.conns):
            for w in pair:
                w.transport.abort()


class Proxies:
    """The asyncio loop thread and its links."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.loop = asyncio.new_event_loop()
        self.links: dict[str, Link] = {}
        self.thread = threading.Thread(target=self.loop.run_forever, name="proxies", daemon=True)
        self.thread.start()

    def _call(self, coro_fn, *args):
        async def wrapper():
            return coro_fn(*args)

        return asyncio.run_coroutine_threadsafe(wrapper(), self.loop).result(10)

    def add(self, name: str, listen_ip: str, target: tuple[str, int]) -> Link:
        link = Link(name, listen_ip, target, random.Random(self.rng.random()))
        asyncio.run_coroutine_threadsafe(link.start(), self.loop).result(10)
        self.links[name] = link
        return link

    def set(self, names: list[str] | None = None, cut: bool = False, **settings) -> None:
        """Applies settings to the links named (all if None); `cut` also drops their open
        connections."""

        def apply():
            for name, link in self.links.items():
                if names is None or name in names:
                    link.set(**settings)
                    if cut:
                        link.cut_all()

        self._call(apply)

    def close(self) -> None:
        def stop():
            for link in self.links.values():
                if link.server:
                    link.server.close()
                link.cut_all()

        try:
            self._call(stop)
        except Exception:  # the loop may be gone already
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

