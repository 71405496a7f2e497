"""One name per node: Slurm's. A cloud node has three (`scontrol show node`: `NodeName=gpu-st-p5-3`,
`NodeAddr=10.1.45.12`, `NodeHostName=ip-10-1-45-12`); NCCL's `host:pid:tid` prefix and the kernel print the
host name, srun and the scheduler the node name. Every host a line names is reported under the node name
an `scontrol show node` listing in the logs gives it (round 11), and the node address maps to it. A cloud's
instance listing (`gcloud compute instances list`, `kubectl get nodes -o wide`: a `NAME` column and an
`INTERNAL_IP` or `INTERNAL-IP` one) pairs each instance's address with its name the same way (round 27), and so
does Ray's `ray list nodes` (`NODE_IP`, `NODE_NAME`; round 37)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence

from nvrx_hpc.attribution.api import Hit

__all__ = ["node_aliases", "pod_nodes", "apply_aliases", "short_hosts"]

_NODE = re.compile(rb"\bNodeName=([A-Za-z][\w.-]*)")
_ADDR = re.compile(rb"\bNode(?:Addr|HostName)=([A-Za-z0-9][\w.:-]*)")
_REACH = 600  # a node's record spans a few lines; the next `NodeName=` ends it
_LISTING_HEAD = re.compile(rb"(?m)^NAME[ \t]+\S.*?[ \t](INTERNAL[_-]IP)\b.*$")  # (a CRLF file's `\r` is in `.*`)
# `kubectl get pods -o wide`: a pod's address and the node it runs on (round 28)
_POD_HEAD = re.compile(rb"(?m)^NAME[ \t]+\S.*?[ \t](IP)[ \t]+(NODE)(?:[ \t].*)?\r?$")  # NODE may end the row
# `ray list nodes`: each node's address and its name (round 37)
_RAY_HEAD = re.compile(rb"(?m)^[ \t]*NODE_ID[ \t]+(NODE_IP)\b.*?[ \t](NODE_NAME)(?:[ \t].*)?\r?$")
_IP = re.compile(rb"(?:\d{1,3}\.){3}\d{1,3}$")
# `kubectl describe pod`: the pod's `Name:`, then a few lines down the `Node:` it was placed on (`node/10.1.2.3`)
_DESCRIBED_POD = re.compile(
    rb"(?m)^Name:[ \t]+([A-Za-z][\w.-]*)[ \t]*\r?\n(?:[^\n]*\n){0,12}?Node:[ \t]+([A-Za-z][\w.-]*)/"
)
_IPOIB_NAME = re.compile(r"(?<=[\w])-ib\d$")  # `tcn-g112-ib0`: the host's IPoIB interface name
_EC2_HOST = re.compile(r"^ip-(\d{1,3})-(\d{1,3})-(\d{1,3})-(\d{1,3})(?:\.|$)")  # ip-10-1-45-12.ec2.internal


def node_aliases(data: bytes) -> dict[str, str]:
    """alias (host name or address) -> node name, from `scontrol show node` records in `data`, then from
    instance listings (an address Slurm names keeps Slurm's name)."""
    found: dict[str, str] = {}
    if b"NodeName=" not in data:
        listing = b"INTERNAL" in data or b" NODE" in data or b"\nNode:" in data
        return {**_listed_addresses(data), **pod_nodes(data)} if listing else found
    starts = list(_NODE.finditer(data))
    for i, m in enumerate(starts):
        end = min(m.end() + _REACH, starts[i + 1].start() if i + 1 < len(starts) else len(data))
        node = m.group(1).decode()
        for a in _ADDR.finditer(data, m.end(), end):
            alias = a.group(1).decode()
            if alias != node and alias != "(null)":
                found.setdefault(alias, node)
    if b"INTERNAL" in data or b" NODE" in data:  # Slurm's own names first
        for alias, node in {**_listed_addresses(data), **pod_nodes(data)}.items():
            found.setdefault(alias, node)
    return found


def pod_nodes(data: bytes) -> dict[str, str]:
    """pod -> the Kubernetes node it ran on, from pod listings and `kubectl describe pod` (round 86a): a pod that
    the node admitted but never started has no address yet, and is still that node's."""
    found = {}
    if b" NODE" in data:
        found = _listed_addresses(data, pods=True)
    if b"\nNode:" in data:
        for m in _DESCRIBED_POD.finditer(data):
            found.setdefault(m.group(1).decode(), m.group(2).decode())
    return found


def _listed_addresses(data: bytes, pods: bool = False) -> dict[str, str]:
    """address -> instance name from the rows under an instance listing's header (columns are aligned: a row's
    address starts where its header's `INTERNAL_IP` does; a blank line ends the table); in a pod listing, the
    pod's address -> its `NODE` column; with `pods`, only each pod's name -> its node."""
    found: dict[str, str] = {}
    heads = [] if pods else [(h, None) for h in _LISTING_HEAD.finditer(data)]
    heads += [(h, 2) for h in _POD_HEAD.finditer(data)]
    heads += [] if pods else [(h, 2) for h in _RAY_HEAD.finditer(data)]
    for head, named_by in heads:
        column, pos = head.start(1) - head.start(), head.end() + 1
        node_column = head.start(named_by) - head.start() if named_by else None
        while pos < len(data):
            end = data.find(b"\n", pos)
            row, pos = data[pos : len(data) if end < 0 else end], len(data) if end < 0 else end + 1
            if not row.strip():
                break
            fields, cell = row.split(), (row[column:].split(None, 1) or [b""])[0]
            name = fields[0] if fields and node_column is None else (row[node_column:].split(None, 1) or [b""])[0]
            if not (fields and name and row[column - 1 : column] in (b" ", b"\t")) or \
                    not (_IP.match(cell) or pods and cell == b"<none>" and name[:1].isalpha()):
                continue
            if not pods:
                found.setdefault(cell.decode(), name.decode())
            if named_by and fields[0] != name and fields[0][:1].isalpha():  # a pod's host name is its own
                found.setdefault(fields[0].decode(), name.decode())  # name: the node it runs on (round 37)
    return found


def apply_aliases(
    hits: Sequence[Hit], rank_hosts: dict[int, str], addr_hosts: dict[str, str], aliases: Mapping[str, str],
    hosts: Iterable[str] = (),
) -> list[Hit]:
    """`hits` with each node under its Slurm name; `rank_hosts` and `addr_hosts` renamed in place, and every
    aliased address added to `addr_hosts`. `hosts`: other host names the logs give (a shell prompt's)."""
    for r, host in rank_hosts.items():
        rank_hosts[r] = aliases.get(host, host)
    for addr, host in addr_hosts.items():
        addr_hosts[addr] = aliases.get(host, host)
    for alias, node in aliases.items():
        if alias[:1].isdigit() or ":" in alias:
            addr_hosts.setdefault(alias, node)
    # A line placed by an address only (a lost node's address, Ray's `ip=` prefix) is on the host the logs
    # pair that address with; an address they pair with no host places nothing.
    names = {**{a: h for a, h in addr_hosts.items() if a[:1].isdigit() or ":" in a}, **aliases}
    for host in {h.node for h in hits if h.node} | set(hosts):  # EC2's host names spell their address (round 35;
        # a prompt's, `ubuntu@ip-172-31-27-190:~$`, round 102h)
        m = _EC2_HOST.match(host)
        if m:
            names.setdefault(".".join(m.groups()), host)
    out = []
    for h in hits:
        node = names.get(h.node or h.fields.get("ray_ip", ""), h.node)
        out.append(dataclasses.replace(h, node=node) if node != h.node else h)
    return out


def _short_host(name: str) -> str:
    """`vg-h100-0b.cluster.internal` -> `vg-h100-0b`: one host shows up as its FQDN in one log and its short
    name in another; the short name is the one Slurm knows (and excludes). The name of its InfiniBand interface
    (`tcn-g112-ib0`, what a rendezvous over IPoIB reports, round 56a) is the host's too. Addresses stay whole."""
    head, dot, _rest = name.partition(".")
    short = head if dot and head[:1].isalpha() else name
    return _IPOIB_NAME.sub("", short) if short[:1].isalpha() else short


def short_hosts(names: Sequence[str]) -> list[str]:
    """Host names (or `host:gpu`) in their short form, each once, in order."""
    out: list[str] = []
    for n in names:
        host, colon, rest = n.partition(":")
        short = _short_host(host) + colon + rest
        if short not in out:
            out.append(short)
    return out
