"""Who a network error is about: the remote peer that several hosts name, not the hosts that print it.

An InfiniBand/RoCE completion error, an EFA timeout or a socket reset is printed by the end that saw
it fail, and names the other end by address (`Got completion from peer 10.0.0.7<40213>`, `Call to recv
from 10.0.0.5<5521>`, `Peer host id: i-07f3`). When several hosts report and most of them name one
peer, that peer is the suspect. Addresses become hosts through whatever the logs give: each reporting
line's own `localGid ::ffff:<ip>`, NCCL's `Bootstrap : Using eth0:<ip>` and `NET/IB : Using ... OOB
ib0:<ip>` with its `host:pid:tid` prefix, DeepSpeed's `Using IP address of <ip> for node <host>`,
hosts-file lines (`<ip>  <host>`), table rows the other way round (`<host>  <ip>`) and `<host> (<ip>)`.
`sample_addresses` reads those from a file's sampled head and tail (regexes over whole byte blocks, no
per-line Python work); `peer_suspect` decides.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from nvrx_hpc.attribution.api import Category, Hit, Role

__all__ = ["sample_addresses", "peer_suspect", "names_peer", "PeerFinding"]

_IP = rb"(?:\d{1,3}\.){3}\d{1,3}"
# IPv6, with the zone of a link-local one (`fe80::b4f1:9cff:fe2e:61d5%veth3a91c27`: a container's veth, round 32)
_IP6 = rb"[0-9A-Fa-f]{1,4}:[0-9A-Fa-f:]*:[0-9A-Fa-f]{1,4}(?:%[\w.-]+)?"
# a whole name, never the tail of one: a container's host name is its id, which may start with a digit
_HOST = rb"(?<![\w.-])(?:[A-Za-z][\w-]*(?:\.[A-Za-z][\w-]*)*|[0-9a-f]{12}(?![\w.-]))"
# (host group, address group, needle) per pattern; the host comes first unless the pattern says otherwise.
# A pattern with a needle runs only on the lines holding it (found by bytes.find): run over whole blocks,
# a pattern that starts with a host name is tried at every byte (round 19: 4.7 of 7.6 s on 10^6 lines).
_ADDRESS_LINES = (
    (
        re.compile(
            rb"(" + _HOST + rb"):\d+:\d+ \[\d+\] NCCL INFO (?:Bootstrap|NET/IB|NET/Socket|NET ?:)[^\n]*?Using"
            rb"[^\n]*?[:\s](" + _IP + rb"|" + _IP6 + rb")<"
        ),
        1,
        2,
        b" NCCL INFO ",
    ),
    (  # a logger that puts `[host:pid=N]` before NCCL's words (round 66a)
        re.compile(
            rb"\[(" + _HOST + rb"):pid=\d+\] NCCL INFO (?:Bootstrap|NET/IB|NET/Socket|NET ?:)[^\n]*?Using"
            rb"[^\n]*?[:\s](" + _IP + rb"|" + _IP6 + rb")<"
        ),
        1,
        2,
        b" NCCL INFO ",
    ),
    (re.compile(rb"Using IP address of (" + _IP + rb") for node (" + _HOST + rb")"), 2, 1, None),
    (re.compile(rb"(?m)^[ \t]*(" + _IP + rb")[ \t]+(" + _HOST + rb")(?:[ \t]+[\w.-]+)*[ \t\r]*$"), 2, 1, None),
    (re.compile(rb"(?m)^[ \t]*(" + _HOST + rb")[ \t]+(" + _IP + rb")[ \t\r]*$"), 1, 2, None),  # `host  ip` rows
)
# `ray start`'s `Local node IP: <ip>` under the start-up script's line naming the node it runs on (`[setup] worker
# gpu-c08`, `Starting WORKER 1 at gpu-c08`: Ray's Slurm template), round 29
_ANSI = re.compile(rb"\x1b\[[0-9;]*m")  # a terminal's colours around Ray's words (`\x1b[37mLocal node IP\x1b[39m`)
_RAY_LOCAL_IP = re.compile(rb"Local node IP: (" + _IP + rb")")
_STARTING_ON = re.compile(rb"(?:\bat|\bon|\bworker|\bhead|\bnode)[ :]+(" + _HOST + rb")[ \t\r]*\Z", re.IGNORECASE)
# `ray list nodes --detail`: a node's `node_ip:`, then `hostname:` further down its block (indented lines), round 33
_RAY_NODE_BLOCK = re.compile(
    rb"node_ip: (" + _IP + rb")[ \t\r]*\n(?:[ \t]+[^\n]*\n){0,16}?[ \t]+hostname: (" + _HOST + rb")"
)
# `<host> (<ip>)`: found from the address back (a pattern that starts with the host is tried at every byte)
_PAREN_IP = re.compile(rb" \((" + _IP + rb")\)")
_HOST_AT_END = re.compile(rb"(" + _HOST + rb")\Z")
# The remote end a reporting line names, and its own end (to map addresses to the reporter's host).
_PEER = re.compile(
    r"(?:from peer|by remote peer|Peer host id:|Call to \w+ (?:from|to)|[Cc]onnect to|connect\(\) to|"
    r"for ep 0x[0-9a-fA-F]+ -|\] connect \[) ?"  # gloo's `pair.cc:799] connect [10.12.3.22]:46651`
    r"(?:host )?"
    r"(?P<peer>[\w.:%\-]+?)(?:<\d+>|[\s),\]]|$)"
)
_LOCAL = re.compile(r"(?:localGid|My host id:) ?(?P<local>[\w.:\-]+?)(?:[\s),]|$)")
_NETWORK_ROLES = (Role.ROOT, Role.WEAK)


_V4_PORT = re.compile(r"^(\d{1,3}(?:\.\d{1,3}){3}):\d+$")  # Open MPI's `connect() to 10.12.0.42:1024`


def _norm(addr: str) -> str:
    addr = addr.strip().lower().removeprefix("::ffff:")
    return _V4_PORT.sub(r"\1", addr)


def _short(name: str, known: set[str]) -> str:
    """`cn-g005.cluster` -> `cn-g005` when the job knows the host by its short name."""
    short = name.split(".", 1)[0]
    return short if name not in known and short in known else name


def names_peer(text: str) -> bool:
    """Whether a line names the remote end it failed to talk to."""
    return _PEER.search(text) is not None


def _lines_with(data: bytes, needle: bytes) -> Iterable[bytes]:
    start = 0
    while (at := data.find(needle, start)) >= 0:
        end = data.find(b"\n", at)
        end = len(data) if end < 0 else end
        yield data[data.rfind(b"\n", 0, at) + 1 : end]
        start = end + 1


def sample_addresses(data: bytes) -> dict[str, str]:
    """address -> host from the lines of `data` that pair them (see the module docstring)."""
    out: dict[str, str] = {}
    data = _ANSI.sub(b"", data) if b"\x1b[" in data else data
    for pattern, host_group, addr_group, needle in _ADDRESS_LINES:
        blocks = [data] if needle is None else _lines_with(data, needle)
        for block in blocks:
            for m in pattern.finditer(block):
                out.setdefault(m.group(addr_group).decode(), m.group(host_group).decode())
    for m in _RAY_LOCAL_IP.finditer(data):
        line_start = data.rfind(b"\n", 0, m.start())
        above = data[data.rfind(b"\n", 0, max(line_start, 0)) + 1 : max(line_start, 0)]
        host = _STARTING_ON.search(above) if line_start > 0 else None
        if host is not None and any(c.isdigit() for c in host.group(1).decode()):
            out.setdefault(m.group(1).decode(), host.group(1).decode())
    for m in _RAY_NODE_BLOCK.finditer(data):
        out.setdefault(m.group(1).decode(), m.group(2).decode())
    for m in _PAREN_IP.finditer(data):
        host = _HOST_AT_END.search(data, max(0, m.start() - 128), m.start())
        if host is not None:
            out.setdefault(m.group(1).decode(), host.group(1).decode())
    return out


_IP_TEXT = re.compile(r"(?:\d{1,3}\.){3}\d{1,3}")
_PEERLESS = "nccl_ib_completion_unnamed"  # NCCL before 2.4: `Got completion with error 12`, no peer named


def peerless(cause: object) -> bool:
    """Whether a cause is a completion error that names no peer (its reporters' hosts are the evidence)."""
    return getattr(cause, "signature", None) == _PEERLESS


@dataclass(frozen=True)
class PeerFinding:
    node: str | None  # the peer host most reporters name; None when the logs do not single one out
    peer: str | None  # the address they name
    reporters: int  # how many hosts reported a peer
    votes: int  # how many of them name `peer` (peerless errors: how many ranks of `node` report)
    ranks: int = 0  # peerless errors: how many ranks report in all
    port_down: bool = False  # no peer stood out; `node` is the one host whose own port a listing shows down
    on_every_link: bool = False  # no peer stood out; `node` is the one host at an end of every failed connection

    def explain(self) -> str:
        if self.on_every_link:
            return (f"{self.reporters} hosts report it and no one peer stands out; {self.node} is at one end of every "
                    "failed connection")
        if self.port_down:
            return (f"{self.reporters} hosts report it and no one peer stands out; {self.node} is the one host "
                    "whose port a pasted listing shows down")
        if self.node is None:
            return f"{self.reporters} hosts report it and no one peer host stands out, so none is named"
        if self.ranks:
            return (f"{self.votes} of the {self.ranks} ranks that report it run on {self.node}: a node whose link "
                    "fails errs on every connection, its peers only on theirs to it")
        return f"{self.votes} of {self.reporters} reporting hosts name their peer {self.node}"


def peer_suspect(
    hits: Iterable[Hit], rank_nodes: Mapping[int, str], addr_hosts: Mapping[str, str]
) -> PeerFinding | None:
    """The peer that most hosts reporting network errors name, when two or more hosts report.

    None when fewer than two hosts report a peer (the one reporter stays the suspect: its own link).
    A peer named by at least two hosts, more than any other, is the suspect: its host when an address
    maps to one (else `node` is None). When no peer is named by two hosts (two ends naming each other,
    or each a different peer), the link or the fabric is at fault, not one host: `node` is None.
    """
    named: list[tuple[str, str]] = []  # (reporter host, peer address)
    hosts = dict(addr_hosts)
    for h in hits:
        if h.category is not Category.NETWORK or h.role not in _NETWORK_ROLES:
            continue
        host = h.node or (rank_nodes.get(h.rank) if h.rank is not None else None)
        peer = _PEER.search(h.text)
        if host is None or peer is None:
            continue
        local = _LOCAL.search(h.text)
        if local is not None:
            hosts.setdefault(_norm(local.group("local")), host)
        named.append((host, _norm(peer.group("peer"))))
    if len({host for host, _ in named}) < 2:
        return _one_reporters_peer(named, hosts, rank_nodes) or _peerless_majority(hits, rank_nodes)
    votes: dict[str, set[str]] = defaultdict(set)
    known = set(rank_nodes.values()) | {host for host, _ in named}
    links: list[set[str]] = []  # each failed connection's two hosts
    for host, peer in named:
        target = _short(hosts.get(peer, peer), known)
        if target != host:
            votes[target].add(host)
            links.append({host, target})
    reporters = len({host for host, _ in named})
    if not votes:
        return _port_down(hits, reporters) or PeerFinding(None, None, reporters, 0)
    ranked = sorted(votes.items(), key=lambda kv: -len(kv[1]))
    top, voters = ranked[0]
    if len(voters) < 2 or (len(ranked) > 1 and len(ranked[1][1]) == len(voters)):
        # no peer named by two hosts; the one host at an end of every failed connection, when they are two or more
        # and not all one pair (n12 fails to reach n13, n13 to reach n14: n13, round 105f)
        common = set.intersection(*links)
        if len(common) == 1 and (one := next(iter(common))) in known | set(hosts.values()):
            return PeerFinding(one, None, reporters, len(voters), on_every_link=True)
        return _port_down(hits, reporters) or PeerFinding(None, None, reporters, len(voters))
    job = known | set(hosts.values())
    node = top if top in job else _left_over(top, job, hosts, {h for h, _ in named})
    return PeerFinding(node, top, reporters, len(voters))


def _left_over(peer: str, known: set[str], hosts: Mapping[str, str], reporters: set[str]) -> str | None:
    """The one host of the job that an address no line pairs with a host can be: every other host of the job
    reported the error or has an address of its own on the peer's network (round 81: the reporters' `localGid`s
    are theirs, so the peer they all name is the job's remaining host); None when none or several are left."""
    if not _IP_TEXT.fullmatch(peer):
        return None
    net = peer.rsplit(".", 1)[0]
    on_net = {host for addr, host in hosts.items() if addr.rsplit(".", 1)[0] == net}
    if not on_net:
        return None  # no host of the job is on the peer's network: it may be no host of the job at all
    left = known - reporters - on_net
    return next(iter(left)) if len(left) == 1 else None


def _one_reporters_peer(
    named: list[tuple[str, str]], hosts: Mapping[str, str], rank_nodes: Mapping[int, str]
) -> PeerFinding | None:
    """One host's ranks (two lines or more) all failed to reach the same other host of the job: that host. Its
    own ranks would have named the reporter, had the reporter's link been down (round 30)."""
    known = set(rank_nodes.values()) | {host for host, _ in named}
    targets = {_short(hosts.get(peer, peer), known) for _host, peer in named}
    if len(named) < 2 or len(targets) != 1:
        return None
    (target,) = targets
    reporter = named[0][0]
    if target == reporter or (target not in known and target not in hosts.values()):
        return None  # an address no line of the job pairs with a host
    return PeerFinding(target, target, 1, 1)


def _port_down(hits: Iterable[Hit], reporters: int) -> PeerFinding | None:
    """The one host whose InfiniBand port a pasted `ibdev2netdev`/`ibstatus` shows down (round 18), when the
    reporters' peers single out no one; None when no host or several do."""
    down = {h.node for h in hits if h.signature == "ib_port_down" and h.node}
    return PeerFinding(next(iter(down)), None, reporters, 0, port_down=True) if len(down) == 1 else None


def _peerless_majority(hits: Iterable[Hit], rank_nodes: Mapping[int, str]) -> PeerFinding | None:
    """Completion errors that name no peer, reported from two or more hosts: the host that holds more than
    half of the reporting ranks (at least two), whose own link failed; None when no host does."""
    reporters: dict[str, set[int]] = defaultdict(set)
    for h in hits:
        if h.signature == _PEERLESS and h.rank is not None:
            host = h.node or rank_nodes.get(h.rank)
            if host is not None:
                reporters[host].add(h.rank)
    if len(reporters) < 2:
        return None
    total = sum(len(r) for r in reporters.values())
    host, ranks = max(reporters.items(), key=lambda kv: len(kv[1]))
    if len(ranks) < 2 or 2 * len(ranks) <= total:
        return PeerFinding(None, None, len(reporters), 0, total)
    return PeerFinding(host, None, len(reporters), len(ranks), total)
