"""The catalog's network part: InfiniBand, RoCE and EFA completions, NCCL's socket and bootstrap set-up, gloo, the
rendezvous store and the MPI libraries' own transports. It sits after the GPU signatures and before the host's in
`signatures.CATALOG`, which keeps the order a line is tried in."""

from __future__ import annotations

from nvrx_hpc.attribution.api import Category, Role
from nvrx_hpc.attribution.signature_record import Signature

__all__ = ["NETWORK"]

_N, _A = Category.NETWORK, Category.APPLICATION
_ROOT, _WEAK, _CASC = Role.ROOT, Role.WEAK, Role.CASCADE
# NCCL up to 2.2x prints `status=12` (or `error 12,`); later ones `status=transport retry counter exceeded(12)`,
# and the GIN transport `NET/IB/GIN:`.
_IB_COMPLETION = (r"NET/IB(?:/\w+)? ?: Got completion from peer (?P<peer>\S+) with "
                  r"(?:error |status=)(?:[A-Za-z][\w ]*?\()?")

NETWORK: tuple[Signature, ...] = (
    # ---- network --------------------------------------------------------------------------------
    Signature(  # NCCL could not open one of the HCAs it was told to use (NCCL_IB_HCA): its channels on that device
        # have no peer, and the job hangs at its first collective (round 87b, eRDMA); that host's set-up
        "nccl_ib_device_unopenable", _N, _ROOT, r"NCCL WARN NET/IB ?: Unable to open device (?P<hca>\S+)",
        ("Unable to open device",), False, "NCCL could not open the InfiniBand device {hca}",
        ("h20-b04:3327:3409 [0] transport/net_ib.cc:652 NCCL WARN NET/IB : Unable to open device erdma_1",),
    ),
    Signature(  # NCCL was made to use a network (NCCL_NET=IB) it could not load on that host: a container without
        # /dev/infiniband, a missing plugin (round 94b); the launch's set-up, met on every run
        "nccl_no_net_plugin", _N, _ROOT, r"NCCL WARN [^\n]*Failed to initialize any NET plugin",
        ("Failed to initialize any NET plugin",), False, "NCCL could not load the network it was told to use",
        ("trn-h01:118:402 [0] net.cc:626 NCCL WARN Failed to initialize any NET plugin",),
    ),
    Signature(  # NCCL found no interface by the name it was given (NCCL_SOCKET_IFNAME set for another host's card,
        # rounds 64a, 87f): that host's launch settings, met again on every run
        "nccl_no_socket_iface", _N, _ROOT, r"Bootstrap ?: no socket interface found",
        ("no socket interface found",), False, "NCCL found no network interface matching its setting",
        ("gpu-r3n11:44907:44907 [0] misc/socket.cc:379 NCCL WARN Bootstrap : no socket interface found",),
    ),
    Signature(  # a peer dialled a loopback address for another host: that host's name resolves to 127.0.1.1 (Debian's
        # /etc/hosts) and it advertised it (round 87d); named from `hostname -i` at its prompt (prompts.py)
        "loopback_peer_refused", _N, _ROOT, r"connect \[127\.\d{1,3}\.\d{1,3}\.\d{1,3}\]:\d+: Connection refused",
        ("connect [127.",), False, "a peer dialled a loopback address another host advertised",
        ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:799] connect [127.0.1.1]:22845: Connection "
         "refused",),
    ),
    Signature(  # gloo dialled a peer's advertised port and the peer's host refused it: a firewall that lets the
        # rendezvous port through but not gloo's random ones (round 94a); met again on every run
        "gloo_peer_refused", _N, _ROOT,
        r"gloo/transport/tcp/pair\.cc:\d+\] connect \[(?P<peer>[0-9a-fA-F.:]+)\]:\d+: Connection refused",
        ("Connection refused",), False, "gloo could not connect to its peer {peer} (refused)",
        ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:799] connect [10.12.3.22]:46651: Connection "
         "refused",),
    ),
    Signature(  # Slurm's PMIx plugin could not reach a node's slurmstepd (a firewall, a re-imaged node): every rank's
        # MPI_Init then times out; the node it names is the one no peer reaches (round 87e)
        "pmix_direct_connect", _N, _ROOT,
        r"mpi/pmix\w*: pmixp_dconn_connect: [^\n]*?Cannot establish direct connection to (?P<failed>[A-Za-z][\w.-]*)",
        ("Cannot establish direct connection",), True, "Slurm's PMIx could not reach {node}'s step daemon",
        ("slurmstepd: error:  mpi/pmix_v4: pmixp_dconn_connect: gn102 [1]: pmixp_dconn.h:246: Cannot establish "
         "direct connection to gn103 (2)",),
    ),
    Signature(  # gloo's TCP transport found no address on the interface it was told to use (HOROVOD_GLOO_IFACE or
        # GLOO_SOCKET_IFNAME named for another host's card, round 98a): that host's network as the job set it up
        "gloo_iface_not_found", _N, _ROOT, r"Unable to find address for: (?P<iface>[\w.:-]+)",
        ("Unable to find address for",), False, "gloo found no address on network interface {iface}",
        ("what():  [enforce fail at gloo/transport/tcp/device.cc:83] ifa != nullptr. Unable to find address for: "
         "enp129s0f1",),
    ),
    Signature(  # NCCL's sockets on the loopback interface (a container with its own network, NCCL_SOCKET_IFNAME
        # unset): no other host can reach them. Weak: a one-node job may use it, and fails of something else (round 83c)
        "nccl_loopback_iface", _N, _WEAK,
        r"NCCL INFO (?:NET ?: Using interface|Bootstrap ?: Using|NET/Socket ?: Using \[\d+\]) ?lo:127\.",
        ("lo:127.",), False, "NCCL uses the loopback interface, which other hosts cannot reach",
        ("5e0b7d31c9af:2211:2211 [0] NCCL INFO NET : Using interface lo:127.0.0.1<0>",),
    ),
    Signature(  # status 5 is a flushed work request: the queue pair had already failed (a peer went away)
        "nccl_ib_flush", _N, _WEAK,
        _IB_COMPLETION + r"(?P<status>5)\b",
        ("NET/IB",), True, "InfiniBand work request flushed (status 5) talking to {peer}",
        ("n3:812:930 [2] NCCL WARN NET/IB : Got completion from peer 10.0.0.7<40213> with status=5 opcode=0 "
         "len=0 vendor err 249 (Recv)",
         "n3:812:930 [2] NCCL WARN NET/IB: Got completion from peer 10.0.0.7<40213> with status=Work Request Flushed "
         "Error(5) opcode=Recv(128) vendor_err=244 localGid ::ffff:10.0.0.3 remoteGidsfe80::7 hca mlx5_0"),
    ),
    Signature(  # a completion status the local adapter raised (1 length, 2 queue-pair operation, 4 protection, 8
        # access: ibv_wc_status): the reporting host's own memory registration or GPUDirect path, not the peer it
        # names, which reports only retries exceeded (round 91d); its set-up, met again on a rerun
        "nccl_ib_local_error", _N, _ROOT,
        _IB_COMPLETION + r"(?P<status>[1248])\b(?!\d)",
        ("NET/IB",), False, "InfiniBand local completion error (status {status}) on this host's adapter",
        ("gn-h2-05:402823:402901 [6] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
         "10.60.18.6<51233> with status=4 opcode=0 len=0 vendor err 81 (Recv)",),
    ),
    Signature(
        "nccl_ib_completion", _N, _ROOT,
        _IB_COMPLETION + r"(?P<status>\d+)",
        ("NET/IB",), True, "InfiniBand completion error (status {status}) talking to {peer}",
        ("n3:812:930 [2] NCCL INFO NET/IB : Got completion from peer 10.0.0.7<40213> with status=12 opcode=0 "
         "len=0 vendor err 129 (Recv)",
         "n3:812:930 [2] NCCL WARN NET/IB: Got completion from peer 10.0.0.7<40213> with status=transport retry "
         "counter exceeded(12) opcode=Send(0) vendor_err=129 localGid ::ffff:10.0.0.3 hca mlx5_0",
         "n3:812:930 [2] NCCL WARN NET/IB/GIN: Got completion from peer 10.0.0.7<40213> with status=12 opcode=1"),
    ),
    Signature(  # NCCL before 2.4 names no peer: `Got completion with error 12` (retry exceeded); weak, like a
        # flush: the printer may be either end of the link (round 14)
        "nccl_ib_completion_unnamed", _N, _WEAK, r"NET/IB ?: Got completion with error (?P<status>\d+), opcode",
        ("Got completion with error",), True, "InfiniBand completion error (status {status})",
        ("gpu-c03:22411:22655 [1] transport/net_ib.cc:827 NCCL WARN NET/IB : Got completion with error 12, opcode 0, "
         "len 0, vendor err 129",),
    ),
    Signature(  # torch built against one NCCL, another loaded at run time: a config field the old one does not know
        # (round 53a: `blocking` from torch 2.1 on NCCL 2.16); the environment's, on every rank, until it is fixed
        "nccl_config_mismatch", _A, _ROOT, r"NCCL WARN[^\n]*Invalid config \w+ attribute value",
        ("Invalid config",), False, "NCCL refused the config torch gave it: torch and the loaded NCCL do not match",
        ("n1:2714:2714 [0] init.cc:1303 NCCL WARN Invalid config blocking attribute value -2147483648",),
    ),
    Signature(  # NCCL's bootstrap met a connection of another kind than it waited for: the hosts' interfaces or IB
        # set-up do not match (works with NCCL_IB_DISABLE=1); a restart on the same set-up meets it again (round 51b)
        "nccl_socket_wrong_type", _N, _ROOT, r"NCCL WARN[^\n]*socketFinalizeAccept: wrong type \d+ != \d+",
        ("wrong type",), False, "NCCL's connection set-up between hosts met the wrong kind of connection",
        ("n1:48211:48401 [0] misc/socket.cc:457 NCCL WARN socketFinalizeAccept: wrong type 3 != 4",),
    ),
    Signature(  # an MPI library's own InfiniBand transport gave up on a peer (HPE MPT, Open MPI's openib): weak, as
        # the unnamed NCCL completion error is: the printer may be either end of the link (round 50b)
        "mpi_ib_retry_exceeded", _N, _WEAK,
        # UCX's own (`[lxbk1127:2330856:0:2330856] ib_mlx5_log.c:177  Transport retry count exceeded on mlx5_0:1/IB`)
        r"(?:(?:MPT ERROR: |\[)(?P<node>[A-Za-z][\w.-]*)(?::\d+:\d+:\d+\] ib_mlx5_log\.c:\d+)?:?\s+"
        r"Transport retry count exceeded|"
        r"The InfiniBand retry count between two MPI processes has been\s+exceeded)",
        ("Transport retry count exceeded", "InfiniBand retry count"), True,
        "the MPI library's InfiniBand transport exceeded its retry count",
        ("MPT ERROR: r3i3n7: Transport retry count exceeded on mlx5_0:1/IB",
         "The InfiniBand retry count between two MPI processes has been exceeded."),
    ),
    Signature(
        "nic_link_down", _N, _ROOT,
        r"(?:mlx5_core(?: (?P<device>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d))?[^\n]*"
        r"(?:Link down|link down|Cable error|module \d+, (?:Cable(?! plugged)|Power)|health compromised|"
        r"firmware fatal|cmd_exec timeout)|\bib\w*: (?:lost carrier|[Ll]ink down)|NIC Link is Down|"
        r"mlx5_ib\b[^\n]*\bport \d+ link down|"
        # a launcher's NIC health check (NVIDIA Resiliency Extension's, round 100a): its node, with the agent's suffix
        r"NIC device \w+: Port state changed from ACTIVE to DOWN|"
        r"Node (?P<node>[A-Za-z][\w.-]*?)(?:_\d+_\d+)? has unhealthy NIC link)",
        ("mlx5_core", "lost carrier", "Link is Down", "mlx5_ib", "Port state changed", "unhealthy NIC link"), True,
        "network interface went down",
        ("Mar  3 14:02:11 dgx-17 kernel: mlx5_core 0000:0c:00.0 ibp12s0: Link down",
         "[ERROR] [dgx-b106] ft_rendezvous_barrier.py:1204 NIC link state health check failed for node "
         "dgx-b106_911870_0: Node dgx-b106_911870_0 has unhealthy NIC link(s)."),
    ),
    Signature(  # the HCA itself reported a fault to NCCL: the printing host's own adapter (round 13)
        "nccl_ib_async_event", _N, _ROOT,
        r"NET/IB ?: (?:\S+ )?(?:Got async event ?: |async fatal event on \w+ \([^)]*\): )(?P<event>port error|"
        # (`invalid request local work queue error` on a QP, round 96c)
        r"local catastrophic error|[\w ]*?(?:fatal|catastrophic error|access error|work queue error|violation[\w ]*))",
        ("async event", "async fatal event"), True, "the InfiniBand adapter reported: {event}",
        ("node48:34050:34121 [0] transport/net_ib.cc:93 NCCL WARN NET/IB : Got async event : port error",
         "gn057:815:864 [0] transport/net_ib.cu:80 NCCL WARN NET/IB : Got async event : local catastrophic error"),
    ),
    Signature(  # a peer dialling Docker's default bridge (docker0 hands out 172.17.0.x): an address the head
        # advertised that no other host can reach, every time until the set-up is fixed (round 55a). Only the
        # bridge's first /24: a site whose own network is 172.17.0.0/16 elsewhere is not taken for it. libvirt's
        # default bridge (virbr0, 192.168.122.x) is the same mistake (round 61a)
        "bridge_address_unreachable", _N, _ROOT,
        # and the wildcard address a head was told to advertise (`--node-ip-address 0.0.0.0`, round 61b)
        r"(?:trying to connect to \(|[Cc]onnect(?:ion)? to )(?:(?:172\.17\.0|192\.168\.122)\.\d{1,3}\b|"
        r"\[?0\.0\.0\.0\]?[:<,)])",
        ("172.17.0.", "192.168.122.", "0.0.0.0"), False,
        "a peer dialled an address other hosts cannot reach (a bridge's: docker0's 172.17.0.x, virbr0's 192.168.122.x; "
        "or the wildcard 0.0.0.0)",
        ("[E socket.cpp:957] [c10d] The client socket has timed out after 1800s while trying to connect to "
         "(172.17.0.2, 44737).",),
    ),
    Signature(
        "nccl_connect_failure", _N, _ROOT,
        r"NCCL WARN[^\n]*(?:socketStartConnect|socketPollConnect|Connect to \S+ failed|Call to connect)",
        ("NCCL WARN",), True, "NCCL could not connect to a peer",
        ("n2:311:319 [4] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.2.0.1<43121> failed : "
         "Connection refused",),
    ),
    Signature(  # the printer waited for a peer that stopped answering: a victim's line (EFA/OFI, libfabric)
        "net_peer_timeout", _N, _WEAK,
        r"(?:NET/OFI[^\n]*completed with error[^\n]*(?:RC: 11[02]\b|Connection timed out|Host is down)|"
        r"Call to recv from \S+ failed ?: Connection timed out|retries exhausted waiting for peer|"
        r"UCX\s+ERROR (?:Error )?Endpoint timeout was not handled for ep \S+ - \S+)",  # UCX names the peer (round 38)
        ("RC: 110", "RC: 112", "Host is down", "Connection timed out", "retries exhausted", "Endpoint timeout"), True,
        "a network peer stopped answering",
        ("p5-1:7331:7339 [0] nccl_net_ofi_rdma.cpp:1318 NCCL WARN NET/OFI Request 0x7f1e completed with error. "
         "RC: 110. Error: Connection timed out. Completed length: 0",
         "w-2:83:2526 [3] misc/socket.cc:503 NCCL WARN Net : Call to recv from 10.1.8.7<41468> failed : Connection "
         "timed out"),
    ),
    Signature(
        "nccl_net_failure", _N, _ROOT,
        # (NCCL's socket helpers print `include/socket.h 398 NCCL WARN Call to recv failed : ...`, round 96b)
        r"(?:NET/(?:Socket|IB|OFI)|Net |NCCL WARN Call to (?:recv|send|write|read) )[^\n]{0,80}?"
        r"(?:Connection reset by peer|Broken pipe|completed with error|"
        r"Connection refused|No route to host)",
        ("Connection reset by peer", "Broken pipe", "completed with error", "Connection refused", "No route to host"),
        True, "network failure in NCCL transport",
        ("n2:77:90 [0] NCCL WARN Net : Call to recv from 10.0.0.5<5521> failed : Connection reset by peer",),
    ),
    Signature(  # Open MPI's TCP transport reached a process it did not expect: the address it dialled belongs to
        # another host too (docker0, virbr0 and the like, alike on every node), round 96h; fixed by choosing the
        # interface (btl_tcp_if_include), not by a relaunch
        "mpi_btl_tcp_unexpected_peer", _N, _ROOT,
        r"mca_btl_tcp_endpoint_recv_connect_ack\] received unexpected process identifier",
        ("received unexpected process identifier",), False,
        "Open MPI's TCP transport reached the wrong process (an address several hosts share)",
        ("[dgx-n12][[31407,1],5][btl_tcp_endpoint.c:626:mca_btl_tcp_endpoint_recv_connect_ack] received unexpected "
         "process identifier [[31407,1],2]",),
    ),
    Signature(  # Omni-Path's PSM2 could not open a hardware context on its adapter (`hfi_userinit: assign_context
        # command failed`, round 96h): the fabric adapter's set-up for the job, met again as launched
        "psm2_hfi_context_failed", _N, _ROOT,
        r"hfi_userinit: (?:assign_context command failed|mmap of \w+ at \S+ failed)",
        ("hfi_userinit",), False, "Omni-Path's PSM2 could not open a context on the fabric adapter",
        ("[2] kn041.228417hfi_userinit: assign_context command failed: Invalid argument",),
    ),
    Signature(  # Open MPI's TCP transport cannot reach a peer's address: an interface that only one node has (a
        # libvirt bridge, docker0) offered as the way to it, or a firewall (round 88f); fixed by choosing the
        # interface (btl_tcp_if_include), not by a relaunch
        "mpi_btl_tcp_connect_failed", _N, _ROOT,
        r"(?:mca_btl_tcp_endpoint_complete_connect\] |btl: tcp: )connect\(\) to (?P<addr>\d{1,3}(?:\.\d{1,3}){3})"
        r"(?::\d+)? failed: (?P<how>No route to host|Connection refused|Connection timed out)",
        ("mca_btl_tcp_endpoint_complete_connect", "btl: tcp: connect"), False,
        "Open MPI's TCP transport could not reach a peer's address ({how})",
        ("[dgx-b03][[52817,1],1][btl_tcp_endpoint.c:796:mca_btl_tcp_endpoint_complete_connect] connect() to "
         "192.168.122.1 failed: No route to host (113)",
         "[hpc-c01:20431] btl: tcp: connect() to 10.12.0.42:1024 failed: No route to host (113)"),
    ),
    Signature(  # two ranks of one job chose different point-to-point layers (one found its UCX/IB device, one did
        # not), so MPI_Init cannot connect them (round 90g): the rank that prints it fell back; a rerun usually picks
        # the same layer everywhere
        "mpi_pml_mismatch", _N, _ROOT,
        r"selected pml (?P<mine>\w+), but peer \[\[[\d,]+\],\d+\] on (?P<peer>[A-Za-z][\w.-]*) "
        r"selected pml (?P<theirs>\w+)",
        ("selected pml",), True,
        "MPI_Init failed: this rank chose the {mine} transport layer and a peer on {peer} chose {theirs}",
        ("[cn0412:48213] [[51277,1],2] selected pml ob1, but peer [[51277,1],0] on cn0412 selected pml ucx",),
    ),
    Signature(  # Cray MPICH's libfabric completion queue returned an error (Slingshot's cxi provider: a message that
        # could not be delivered, round 91g): the fabric under the rank that reports it; HPE's advice is to rerun
        "mpich_ofi_cq_error", _N, _ROOT,
        r"MPIDI_OFI_handle_cq_error\(\d+\): OFI poll failed \([^)\n]*?- (?P<what>[A-Z_]+)\)",
        ("OFI poll failed",), True, "Cray MPICH's fabric completion failed ({what})",
        ("MPIDI_OFI_handle_cq_error(1062): OFI poll failed (ofi_events.c:1064:MPIDI_OFI_handle_cq_error:Input/output "
         "error - UNDELIVERABLE)",),
    ),
    Signature(  # the host's own fabric adapter refused its set-up: the OFI plugin could not open its address vector,
        # or the kernel's driver failed the adapter's commands (`infiniband efa_0: Failed to allocate pd[-12]`), round
        # 95d; that host's adapter, where a restart without it goes on
        "fabric_adapter_setup_failed", _N, _ROOT,
        r"(?:NET/OFI Couldn't open AV|infiniband \S+: Failed to (?:process command|allocate pd|create ah|create qp|"
        r"create cq|register mr)\b)",
        ("Couldn't open AV", "infiniband "), True, "the host's fabric adapter failed its set-up (its driver or device)",
        ("ip-10-0-1-7:2341:2390 [7] create_nccl_ofi_component:459 NCCL WARN NET/OFI Couldn't open AV. RC: -22, "
         "ERROR: Invalid argument", "[ 2817.403130] infiniband efa_0: Failed to allocate pd[-12]"),
    ),
    Signature(  # Cray MPICH on Slingshot could not post receives: the cxi provider's completion queue is full (the rank
        # that prints it is flooded, round 97a); its size (FI_CXI_DEFAULT_CQ_SIZE) as launched, not a relaunch
        "cxi_cq_exhaustion", _N, _ROOT, r"MPICH suspects a hang due to completion queue exhaustion",
        ("completion queue exhaustion",), False, "Slingshot's completion queue ran full (no receive could be posted)",
        ("PE 0: MPICH WARNING: OFI is failing to make progress on posting a receive. MPICH suspects a hang due to "
         "completion queue exhaustion.",),
    ),
    Signature(  # the OFI plugin cannot reach a peer's EFA address at all (a security group, a subnet), round 34
        "ofi_address_insert", _N, _ROOT, r"NET/OFI Unable to insert remote address", ("NET/OFI",), True,
        "NCCL's OFI plugin could not add a peer's address (the fabric between the nodes)",
        ("ip-10-0-88-14:30112:30261 [0] nccl_net_ofi_rdma.cpp:6112 NCCL WARN NET/OFI Unable to insert remote address",),
    ),
    Signature(  # the OFI plugin cannot open its endpoint on the EFA device (libfabric and plugin disagree), round 60b;
        # or finds no EFA provider at all and NCCL falls back to sockets, many times slower (a pod without the EFA
        # device), round 74d
        "ofi_endpoint_failed", _N, _ROOT,
        r"NET/OFI (?:Creating new endpoint for domain \S+|Couldn't open a fabric provider|Unable to create endpoint"
        r"|aws-ofi-nccl initialization)[^\n]*?failed", ("NET/OFI",), True,
        "NCCL's OFI plugin could not open its network endpoint (the EFA set-up)",
        ("ip-10-3-18-7:79:176 [0] nccl_net_ofi_rdma_domain_get_ep:969 NCCL WARN NET/OFI Creating new endpoint for "
         "domain 0x7f02d5e6ece5 failed: Invalid argument",),
    ),
    Signature(  # NCCL_NET names a network no loaded plugin provides (`NCCL WARN Error: network FasTrak not found.`):
        # the node's net plugin or its devices are missing (a rebooted node before its devices came up, an image whose
        # plugin cannot load, round 106g); the set-up where it runs, not the code
        "nccl_net_not_found", _N, _ROOT, r"NCCL WARN Error: network (?P<net>\S+) not found",
        ("Error: network",), False, "NCCL's network {net} was not found (its plugin or devices are missing)",
        ("a3mega-a3meganodeset-6:1405:1405 [7] net.cc:579 NCCL WARN Error: network FasTrak not found.",),
    ),
    Signature(
        "nccl_remote_error", _N, _WEAK,
        r"(?:remote process exited or there was a network error|ncclRemoteError)",
        ("remote process exited", "ncclRemoteError"), True, "NCCL peer exited or network error",
        ("ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",),
    ),
    Signature(
        "gloo_peer_closed", _N, _CASC,
        r"gloo[^\n]*(?:Connection closed by peer|Connection reset by peer|Read error|Broken pipe)",
        ("gloo",), True, "gloo peer connection lost",
        ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
         "[127.0.0.1]:5120",),
    ),
    Signature(  # the rendezvous "host" is a path or words: the launch put something else in MASTER_ADDR (a login
        # script's echo that the launcher read as the host's address, round 85d)
        "store_address_garbage", _A, _ROOT,
        r"\[c10d\] The IPv[46] network addresses of \((?P<peer>[^,()]*[/ ][^,()]*), \d+\) cannot be retrieved",
        ("cannot be retrieved",), False, "the rendezvous address is not a host's name: {peer}",
        ("[W socket.cpp:697] [c10d] The IPv6 network addresses of (/root/envs/cu118.bashrc, 29500) cannot be retrieved "
         "(gai error: -3 - Temporary failure in name resolution).",),
    ),
    Signature(  # c10d's client could not resolve the rendezvous host's name: the printer's resolver or hosts file
        # (round 84a: `lab01` unknown on lab02). IPv4's and "not known" (-2) only: a cluster without IPv6 prints the
        # IPv6 warning on every run, and -3 is a resolver's passing failure
        "store_host_unresolved", _N, _ROOT,
        r"\[c10d\] The IPv4 network addresses of \((?P<peer>[^,()]+), \d+\) cannot be retrieved \(gai error: -2\b",
        ("cannot be retrieved",), False, "this host cannot resolve the rendezvous host's name {peer}",
        ("[W socket.cpp:401] [c10d] The IPv4 network addresses of (lab01, 51873) cannot be retrieved (gai error: -2 - "
         "Name or service not known).",),
    ),
    Signature(  # a launcher's ssh could not resolve a worker's name (a pod not yet up, a hostfile's typo), round 86a
        "ssh_host_unresolved", _N, _ROOT,
        r"ssh: Could not resolve hostname (?P<failed>[A-Za-z][\w-]*)[\w.-]*: (?:Name or service not known|"
        r"Temporary failure in name resolution)",
        ("Could not resolve hostname",), True, "the launcher could not resolve {node}'s name",
        ("ssh: Could not resolve hostname seg-hvd-mpiworker-5.seg-hvd: Name or service not known",),
    ),
    Signature(  # torchrun told `--master_addr` with the c10d backend and no `--rdzv_endpoint`: it ignores the address
        # and each node meets at its own localhost, so a multi-node rendezvous times out (round 91f): the launch
        # command's mistake, when the rendezvous then fails (verdict.py); a run that got going says nothing of it
        # (round 92g)
        "master_addr_ignored", _A, Role.CONTEXT,
        r"master_addr is only used for static rdzv_backend and when rdzv_endpoint is not specified",
        ("master_addr is only used",), False, "torchrun ignored --master_addr (c10d rendezvous without an endpoint)",
        ("master_addr is only used for static rdzv_backend and when rdzv_endpoint is not specified.",),
    ),
    Signature(  # the store's address is several hosts, or a node list never expanded (`MASTER_ADDR` set from
        # `$SLURM_JOB_NODELIST`): no host has that name, on any node (round 101f)
        "store_address_host_list", _A, _ROOT,
        r"(?:trying to connect to|network addresses of) "
        r"\((?P<addr>[\w.-]+(?:,[\w.-]+)+|[\w.-]*\[[\d,-]+\][\w.-]*), \d+\)",
        ("trying to connect to (", "network addresses of ("), False,
        "the rendezvous store's address {addr} is a list of hosts, not one host",
        ("torch.distributed.DistNetworkError: The client socket has timed out after 600000ms while trying to connect "
         "to (dgx-a14,dgx-b03, 15517).",),
    ),
    Signature(  # torchrun's agent prints its rendezvous id at start: agents of one job under different ids each wait
        # at a rendezvous of their own (rendezvous_split.py, round 101f)
        "torchrun_run_id", _A, Role.CONTEXT, r"(?:^|\.py:\d+\])\s*run_id +: (?P<run_id>[\w.-]+)\s*$",
        ("run_id",), None, "torchrun's rendezvous id {run_id}",
        ("I0411 11:02:46.412000 2907 dist-packages/torch/distributed/launcher/api.py:194]   run_id           : 413",),
    ),
    Signature(
        "store_failure", _N, _WEAK,
        r"(?:RendezvousTimeoutError|RendezvousClosedError|DistStoreError|TCPStore[^\n]*(?:Connection reset|"
        r"Broken pipe|timed out|Timed out)|client socket has timed out after \d+s while trying to connect)",
        ("Rendezvous", "DistStoreError", "TCPStore", "client socket has timed out"), True,
        "rendezvous / TCPStore failure",
        ("torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 3/4 clients joined.",),
    ),
)
