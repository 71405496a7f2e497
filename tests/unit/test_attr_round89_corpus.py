"""Rules that brought round 89 of blind cases into the corpus: a kernel line an alert bot quotes names its own host,
and the CUDA runtime's `unknown error` on one rank is its GPU's."""

from __future__ import annotations

from _attr_helpers import verdict_of as _verdict

from nvrx_hpc.attribution.api import Category


def test_a_kernel_line_quoted_by_an_alert_bot_is_its_hosts(tmp_path):
    alerts = ["[2023-05-18 16:02:11] node-health: Xid errors on instance: ip-26-0-160-12, Error: May 18 16:01:47 "
              "ip-26-0-160-12 kernel: [91822.413377] NVRM: Xid (PCI:0000:10:1c): 79, pid=0, GPU has fallen off the "
              "bus."]
    v = _verdict(tmp_path, {"xid_alerts.txt": alerts})
    assert v.category is Category.GPU_HARDWARE and v.culprit.nodes == ("ip-26-0-160-12",)


def test_cudas_unknown_error_on_one_rank_is_its_gpu(tmp_path):
    log = ["0: [default3]:terminate called after throwing an instance of 'c10::Error'",
           "0: [default3]:  what():  CUDA error: unknown error",
           "srun: error: gp5n22: task 0: Exited with exit code 1"]
    v = _verdict(tmp_path, {"main_log.txt": log})
    assert v.category is Category.GPU_HARDWARE and v.restartable is True and v.culprit.nodes == ("gp5n22",)
