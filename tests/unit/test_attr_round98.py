"""Rules drawn in round 98's session: the GPU a line of `nvidia-smi -q` speaks of is its section's, and its index is
the section's place in a listing of every GPU (or the index the command picked)."""

from __future__ import annotations

from _attr_helpers import verdict_of as _verdict

from nvrx_hpc.attribution.api import Category

_JOB = ["+ srun --label torchrun --nnodes 2 --nproc_per_node 4 --rdzv_endpoint gpu-a:29500 train.py"] + [
    f"{r // 4}: gpu-{'ab'[r // 4]}:{4100 + r}:{4200 + r} [{r % 4}] NCCL INFO comm 0x55d0c8a2b3f0 rank {r} nranks 8 "
    f"cudaDev {r % 4} busId {r % 4 + 1}b000 - Init COMPLETE" for r in range(8)
] + ["slurmstepd: error: *** STEP 4471.0 ON gpu-a CANCELLED AT 2026-03-09T08:41:55 ***"]


def _section(bus: str, hot: bool) -> list[str]:
    state = "Active" if hot else "Not Active"
    return [f"GPU 00000000:{bus}:00.0", f"        HW Slowdown                       : {state}",
            f"            HW Thermal Slowdown           : {state}",
            f"        SW Thermal Slowdown               : {state}"]


def test_a_hot_gpu_in_a_listing_of_every_gpu_is_the_rank_at_its_place(tmp_path):
    smi = ["$ nvidia-smi -q -d PERFORMANCE | grep -E 'GPU 0000|Slowdown'"]
    for index, bus in enumerate(("1B", "3D", "5E", "7F")):
        smi += _section(bus, hot=index == 2)
    v = _verdict(tmp_path, {"slurm-4471.out": _JOB, "gpu-b-nvidia-smi.txt": smi})
    assert v.category is Category.GPU_HARDWARE
    assert list(v.culprit.ranks) == [6] and list(v.culprit.nodes) == ["gpu-b"] and list(v.culprit.gpus) == ["gpu-b:2"]


def test_the_gpu_the_command_picked_is_the_sections_index(tmp_path):
    smi = ["[ops@gpu-b ~]$ nvidia-smi -i 1 -q -d TEMPERATURE,PERFORMANCE", *_section("3D", hot=True)]
    v = _verdict(tmp_path, {"slurm-4471.out": _JOB, "gpu-b-smi.txt": smi})
    assert list(v.culprit.ranks) == [5] and list(v.culprit.nodes) == ["gpu-b"]


def test_one_section_with_no_command_shown_gives_its_bus_and_no_index(tmp_path):
    v = _verdict(tmp_path, {"slurm-4471.out": _JOB, "gpu-b-smi.txt": _section("7F", hot=True)})
    assert list(v.culprit.gpus) == ["gpu-b:00000000:7F:00.0"] and list(v.culprit.nodes) == ["gpu-b"]


def test_on_a_one_host_job_the_listed_index_is_the_rank(tmp_path):
    log = [f"Torch: Hostname gpu-k21, pid {41803 + r}, using GPU {r}." for r in range(4)]
    log += [f"Torch distributed: local_rank {r}, rank {r}, size 4, backend nccl" for r in range(4)]
    smi = ["$ nvidia-smi -q -d PERFORMANCE"]
    for index, bus in enumerate(("1B", "3D", "5E", "7F")):
        smi += _section(bus, hot=index == 2)
    v = _verdict(tmp_path, {"train.log": log, "nvidia-smi-q-perf.txt": smi})
    assert v.category is Category.GPU_HARDWARE and list(v.culprit.ranks) == [2]


def test_a_throttled_row_of_an_nvidia_smi_query_outlasts_the_time_limit_it_caused(tmp_path):
    head = ("timestamp, index, clocks.current.sm [MHz], utilization.gpu [%], clocks_event_reasons.active, "
            "clocks_event_reasons.sw_thermal_slowdown, clocks_event_reasons.hw_thermal_slowdown")
    rows = [f"2025/03/12 14:{m:02d}:18.504, {i}, {510 if i == 1 and m > 30 else 1980} MHz, 100 %, "
            f"{'0x0000000000000020, Active' if i == 1 and m > 30 else '0x0000000000000000, Not Active'}, Not Active"
            for m in range(20, 59, 2) for i in range(2)]
    log = [f"[default{r}]:h100-n11:{3815571 + r}:{3815644 + r} [{r}] NCCL INFO comm 0x5584a0f3c1e0 rank {r} nranks 2 "
           f"cudaDev {r} busId {r + 1}8000 - Init COMPLETE" for r in range(2)]
    log += ["slurmstepd: error: *** JOB 7781234 ON h100-n11 CANCELLED AT 2025-03-12T15:07:51 DUE TO TIME LIMIT ***"]
    v = _verdict(tmp_path, {"lora-7781234.out": log, "gpu-telemetry.csv": [head, *rows]})
    assert v.category is Category.GPU_HARDWARE and list(v.culprit.ranks) == [1]


def test_a_row_active_in_another_column_is_no_slowdown(tmp_path):
    head = "index, clocks_event_reasons.gpu_idle, clocks_event_reasons.hw_thermal_slowdown"
    log = ["slurmstepd: error: *** JOB 7781234 ON h100-n11 CANCELLED AT 2025-03-12T15:07:51 DUE TO TIME LIMIT ***"]
    v = _verdict(tmp_path, {"job.out": log, "gpu.csv": [head, "0, Active, Not Active", "1, Not Active, Not Active"]})
    assert v.category is Category.SCHEDULER


def test_nvlink_peers_nccl_finds_disabled_are_the_pairs_ranks_not_every_printer(tmp_path):
    log = [f"{r // 4}: [rank{r}]: h-{'ab'[r // 4]}:{100 + r}:{200 + r} [{r % 4}] NCCL INFO comm 0x55 rank {r} nranks 8 "
           f"cudaDev {r % 4} busId {r % 4 + 1}b000 - Init START" for r in range(8)]
    log += [f"1: h-b:{104 + r}:{300 + r} [{r}] graph/paths.cc:319 NCCL WARN P2P is disabled between NVLINK connected "
            f"GPUs {(3, 2)[r % 2]} and {(2, 3)[r % 2]}. This should not be the case given their connectivity, and is "
            "probably due to a hardware issue." for r in range(4)]
    log += [f"1: [rank{r}]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:2027, unhandled "
            "cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5" for r in range(4, 8)]
    v = _verdict(tmp_path, {"slurm-551203.out": log})
    assert v.category is Category.GPU_HARDWARE and v.restartable is True
    assert list(v.culprit.ranks) == [6, 7] and list(v.culprit.nodes) == ["h-b"]


def test_a_segfault_on_a_node_whose_gpu_waits_to_retire_a_page_is_that_gpus(tmp_path):
    log = ["[1,5]<stderr>:[w-1:00187] *** Process received signal ***",
           "[1,5]<stderr>:[w-1:00187] Signal: Segmentation fault (11)",
           "mpirun noticed that process rank 5 with PID 0 on node w-1 exited on signal 11 (Segmentation fault)."]
    smi = ["root@w-1:/workspace# nvidia-smi -q -d ECC,PAGE_RETIREMENT -i 1", "GPU 00000000:3A:00.0",
           "    Retired Pages", "        Double Bit ECC              : 1", "        Pending Page Blacklist      : Yes"]
    v = _verdict(tmp_path, {"w-0_stdout.log": log, "nvidia-smi-q_ecc_w-1.txt": smi})
    assert v.category is Category.GPU_HARDWARE and list(v.culprit.nodes) == ["w-1"]
    assert _verdict(tmp_path / "alone", {"w-0_stdout.log": log}).category is Category.FRAMEWORK_CRASH
