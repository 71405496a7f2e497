"""Rules drawn from round 97 after its first contact was scored: Cray MPICH asked for GPU support without its GTL
library, a file system mounted without flock, Slingshot's completion queue running full, and a C++ runtime's own
failed check (Ray's GCS server) when nothing stronger explains the failure."""

from __future__ import annotations

from _attr_helpers import verdict_of as _verdict

from nvrx_hpc.attribution.api import Category


def test_cray_mpich_without_its_gtl_library_is_the_builds_mistake(tmp_path):
    log = [f"{r}: MPICH ERROR [Rank {r}] [job id 718244.0] [Tue Mar  4 09:12:43 2025] [nid006311] - Abort(-1) "
           f"(rank {r} in comm 0): MPIDI_CRAY_init: GPU_SUPPORT_ENABLED is requested, but GTL library is not linked"
           for r in (0, 2)]
    v = _verdict(tmp_path, {"slurm-718244.out": log})
    assert v.category is Category.APPLICATION and v.restartable is False


def test_a_file_system_without_flock_is_the_hosts_mount(tmp_path):
    log = ["NotImplementedError: FileSystem does not appear to support flock; use SoftFileLock instead"]
    v = _verdict(tmp_path, {"ft.err": log})
    assert v.category is Category.HOST and v.restartable is False


def test_slingshots_full_completion_queue_is_the_network_as_launched(tmp_path):
    log = ["0: PE 0: MPICH WARNING: OFI is failing to make progress on posting a receive. MPICH suspects a hang due to "
           "completion queue exhaustion. Setting environment variable FI_CXI_DEFAULT_CQ_SIZE to a higher number "
           "might circumvent this scenario."]
    v = _verdict(tmp_path, {"slurm-2231907.out": log})
    assert v.category is Category.NETWORK and v.restartable is False


def test_a_c_plus_plus_runtimes_failed_check_is_a_framework_crash_when_nothing_stronger_is_there(tmp_path):
    gcs = ["[2024-02-11 03:46:31,390 C 62 62] (gcs_server) id_def.h:25:  Check failed: binary.size() == Size() || "
           "binary.size() == 0 expected size is 28, but got data  of size 27"]
    assert _verdict(tmp_path / "a", {"gcs_server.err": gcs}).category is Category.FRAMEWORK_CRASH
    ecc = ["F0425 14:12:43.043815 30811 hl_cuda_device.cc:565] Check failed: cudaSuccess == cudaStat (0 vs. 39) Cuda "
           "Error: uncorrectable ECC error encountered",
           "Apr 25 14:12:43 gpu-07 kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid=30811, An uncorrectable double bit "
           "error (DBE) has been detected on GPU in the framebuffer"]
    assert _verdict(tmp_path / "b", {"train.log": ecc}).category is Category.GPU_HARDWARE
