"""Rules drawn from round 103 after its first contact was scored: a process on the peer that network errors name,
which raised an error of its own before them, is the failure; the errors are its echo."""

from __future__ import annotations

from _attr_helpers import verdict_of as _verdict

from nvrx_hpc.attribution.api import Category

_IB = ("dgx-a114: dgx-a114:1190440:1191002 [{g}] transport/net_ib.cc:2350 NCCL WARN NET/IB : Got completion from peer "
       "10.44.3.113<356{g}0> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.44.3.114")


def test_a_peer_that_raised_its_own_error_before_the_network_errors_naming_it_is_the_failure(tmp_path):
    head = ["[2025-08-06 14:02:13,640] [INFO] [runner.py:461:main] Using IP address of 10.44.3.113 for node dgx-a113"]
    raised = ["dgx-a113: [rank0]: Traceback (most recent call last):",
              "dgx-a113: [rank0]: TypeError: unsupported format string passed to NoneType.__format__"]
    ib = [_IB.format(g=g) for g in range(4)]
    v = _verdict(tmp_path, {"slurm-4471902.out": head + raised + ib})
    assert v.category is Category.APPLICATION and list(v.culprit.ranks) == [0] and v.restartable is False
    after = _verdict(tmp_path / "after", {"slurm-4471902.out": head + ib + raised})  # it raised after: no echo
    assert after.category is Category.NETWORK
