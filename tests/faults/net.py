"""The bench's network: one `ip netns` per host, veth pairs to a bridge in the root namespace.

```text
  root namespace (the bench: clients, the harness, the proxies, the ZooKeeper reader)
    <prefix>-br  bridge, 10.A.B.0/24
        .1  clients' source address      (a nemesis may cut a node off from it)
        .2  the proxies' address          (replication links pass through them, see proxy.py)
        .3  the harness's control address (stats, final reads: never cut)
    │ veth <prefix>-<host>  ── eth0 in netns <prefix>-<host>
    ├── n1 .11   n2 .12   n3 .13          cairn nodes (each with an nftables table "fb")
    └── z1 .21   z2 .22   z3 .23          ZooKeeper servers
```

A cut is a set of addresses the node drops (nftables set `blocked`), in both directions: an
output chain at raw priority (before the DNAT that sends replication through a proxy, so it
sees the original destination) and an input chain that drops packets from a blocked address
or belonging to a connection whose original destination is blocked (the replies of a proxied
connection). Everything is named with the run's unique prefix and removed by `teardown`.
"""

from __future__ import annotations

import ipaddress
import logging
import random
import subprocess

log = logging.getLogger("faults.net")

CLIENT = 1
PROXY = 2
CONTROL = 3


def run(cmd: list[str], check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
    """Runs a command, logged; a failure raises with its stderr."""
    log.debug("$ %s", " ".join(cmd))
    p = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=30)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    return p


def used_networks() -> list[ipaddress.IPv4Network]:
    """The IPv4 networks the root namespace already has routes or addresses in."""
    nets = []
    for line in run(["ip", "-4", "-o", "addr", "show"]).stdout.splitlines():
        words = line.split()
        if "inet" in words:
            nets.append(ipaddress.ip_interface(words[words.index("inet") + 1]).network)
    for line in run(["ip", "-4", "route", "show", "table", "all"]).stdout.splitlines():
        first = line.split()[0] if line.split() else ""
        if first[:1].isdigit():
            try:
                nets.append(ipaddress.ip_network(first, strict=False))
            except ValueError:
                pass
    return nets


def pick_subnet(rng: random.Random) -> str:
    """A free 10.A.B.0/24 (A in 64..250): returns "10.A.B"."""
    used = used_networks()
    for _ in range(200):
        base = f"10.{rng.randint(64, 250)}.{rng.randint(0, 255)}"
        net = ipaddress.ip_network(f"{base}.0/24")
        if not any(net.overlaps(u) for u in used if u.prefixlen > 0):
            return base
    raise RuntimeError("no free 10.x.y.0/24 for the bench's bridge")


NFT_TABLE = """table ip fb {{
  set blocked {{
    type ipv4_addr
  }}
  chain nat_out {{
    type nat hook output priority -100; policy accept;
{dnat}
  }}
  chain raw_out {{
    type filter hook output priority -300; policy accept;
    ip daddr @blocked drop
  }}
  chain filt_in {{
    type filter hook input priority 0; policy accept;
    ip saddr @blocked drop
    ct original ip daddr @blocked drop
  }}
}}
"""


class Net:
    """The bridge, the namespaces and their firewalls of one run."""

    def __init__(self, prefix: str, base: str):
        self.prefix = prefix
        self.base = base
        self.bridge = f"{prefix}-br"
        # host name -> its address; the hosts with a firewall table
        self.hosts: dict[str, str] = {}
        self.firewalled: set[str] = set()
        # host name -> the addresses it drops now
        self.blocked: dict[str, set[str]] = {}
        self.up = False

    def ip(self, last: int) -> str:
        return f"{self.base}.{last}"

    @property
    def client_ip(self) -> str:
        return self.ip(CLIENT)

    @property
    def proxy_ip(self) -> str:
        return self.ip(PROXY)

    @property
    def control_ip(self) -> str:
        return self.ip(CONTROL)

    def ns(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def exec_prefix(self, host: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns(host)]

    def create(self) -> None:
        self.up = True
        run(["ip", "link", "add", self.bridge, "type", "bridge"])
        for last in (CLIENT, PROXY, CONTROL):
            run(["ip", "addr", "add", f"{self.ip(last)}/24", "dev", self.bridge])
        run(["ip", "link", "set", self.bridge, "up"])

    def add_host(self, host: str, last: int) -> str:
        """A namespace with its veth on the bridge; returns its address."""
        ns, veth, addr = self.ns(host), f"{self.prefix}-{host}", self.ip(last)
        run(["ip", "netns", "add", ns])
        self.hosts[host] = addr
        run(["ip", "link", "add", veth, "type", "veth", "peer", "name", f"{veth}p"])
        run(["ip", "link", "set", f"{veth}p", "netns", ns])
        run(["ip", "-n", ns, "link", "set", f"{veth}p", "name", "eth0"])
        run(["ip", "link", "set", veth, "master", self.bridge])
        run(["ip", "link", "set", veth, "up"])
        run(["ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0"])
        run(["ip", "-n", ns, "link", "set", "eth0", "up"])
        run(["ip", "-n", ns, "link", "set", "lo", "up"])
        return addr

    def firewall(self, host: str, dnat: list[tuple[str, int, str, int]]) -> None:
        """The host's nftables table: the `blocked` set and DNAT rules (orig ip, orig port ->
        to ip, to port)."""
        rules = "\n".join(
            f"    ip daddr {a} tcp dport {p} dnat to {ta}:{tp}" for a, p, ta, tp in dnat
        )
        run(self.exec_prefix(host) + ["nft", "-f", "-"], input=NFT_TABLE.format(dnat=rules))
        self.firewalled.add(host)
        self.blocked[host] = set()

    def _sync(self, host: str) -> None:
        cmd = self.exec_prefix(host) + ["nft"]
        script = "flush set ip fb blocked\n"
        if self.blocked[host]:
            script += "add element ip fb blocked { " + ", ".join(sorted(self.blocked[host])) + " }\n"
        run(cmd + ["-f", "-"], input=script)

    def block(self, host: str, addrs: list[str]) -> None:
        """`host` drops traffic to and from `addrs` (added to what it drops already)."""
        self.blocked[host] |= set(addrs)
        self._sync(host)

    def unblock(self, host: str, addrs: list[str] | None = None) -> None:
        """`host` stops dropping `addrs` (None: everything)."""
        if addrs is None:
            self.blocked[host] = set()
        else:
            self.blocked[host] -= set(addrs)
        self._sync(host)

    def unblock_all(self) -> None:
        for host in self.firewalled:
            if self.blocked.get(host):
                self.unblock(host)

    def pids(self, host: str) -> list[int]:
        p = run(["ip", "netns", "pids", self.ns(host)], check=False)
        return [int(w) for w in p.stdout.split() if w.isdigit()]

    def teardown(self) -> None:
        """Deletes every namespace (their veths go with them) and the bridge. Processes still
        in a namespace are killed by their PID first."""
        if not self.up:
            return
        for host in list(self.hosts):
            for pid in self.pids(host):
                run(["kill", "-9", str(pid)], check=False)
            run(["ip", "netns", "del", self.ns(host)], check=False)
        run(["ip", "link", "del", self.bridge], check=False)
        self.up = False


def leftovers(prefix_start: str = "fb") -> dict[str, list[str]]:
    """Namespaces and links an earlier run left behind (it was killed before its teardown):
    names `fbXXXXXX-...` with eight hex digits."""
    import re

    pat = re.compile(rf"^({prefix_start}[0-9a-f]{{6}})-")
    found: dict[str, list[str]] = {}
    for line in run(["ip", "netns", "list"], check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = pat.match(name)
        if m:
            found.setdefault(m.group(1), []).append("netns " + name)
    for line in run(["ip", "-o", "link", "show"], check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        m = pat.match(name)
        if m and name.endswith("-br"):
            found.setdefault(m.group(1), []).append("link " + name)
    return found
