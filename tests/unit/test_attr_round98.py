"""Rules drawn in round 98's session: the GPU a line of `nvidia-smi -q` speaks of is its section's, and its index is
the section's place in a listing of every GPU (or the index the command picked)."""

from __future__ import annotations

from _attr_helpers import verdict_of as _verdict

from nvrx_hpc.attribution.api import Category
from nvrx_hpc.attribution.lines import LineContext, classify_line

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


def test_a_cpu_binding_the_step_was_not_given_is_the_jobs_launch_options(tmp_path):
    log = ["srun: error: CPU binding outside of job step allocation, allocated CPUs are: 0x0000FFFFFFFF0000.",
           "srun: error: Task launch for StepId=771204.0 failed on node gpu-c12: Unable to satisfy cpu bind request",
           "srun: error: Application launch failed: Unable to satisfy cpu bind request",
           "slurmstepd: error: *** STEP 771204.0 ON gpu-c11 CANCELLED AT 2025-01-22T16:05:41 ***"]
    v = _verdict(tmp_path, {"slurm-771204.out": log})
    assert v.category is Category.APPLICATION and v.restartable is False and "gpu-c12" in v.culprit.nodes


def test_the_flight_recorder_analysers_missing_dumps_are_not_the_jobs_exception(tmp_path):
    out = ["5: Traceback (most recent call last):", '5:   File "train_vit.py", line 246, in train_one_epoch',
           "5: RuntimeError: stack expects each tensor to be equal size, but got [3, 224, 224] at entry 0 and "
           "[4, 224, 224] at entry 93"]
    out += [f"{r}: [rank{r}]:[E0930 01:14:31.301000886 ProcessGroupNCCL.cpp:661] [Rank {r}] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=12342, OpType=ALLREDUCE, NumelIn=26214400, NumelOut=26214400, "
            "Timeout(ms)=900000) ran for 900054 milliseconds before timing out." for r in (0, 1, 2, 3, 4, 6, 7)]
    fr = ["$ python -m torch.distributed.flight_recorder.fr_trace runs/r7/fr -p trace_rank_",
          "Traceback (most recent call last):", "    assert dumps_ranks == all_ranks, (",
          "AssertionError: Missing dump files from ranks {5}"]
    v = _verdict(tmp_path, {"slurm-88123.out": out, "fr_trace_r7.txt": fr})
    assert v.category is Category.APPLICATION and list(v.culprit.ranks) == [5]


def test_mpiruns_first_process_to_exit_raised_the_error_printed_without_a_rank(tmp_path):
    log = ["Traceback (most recent call last):", '  File "run.py", line 429, in <module>',
           "tensorflow.python.framework.errors_impl.InternalError: Failed to create session.",
           "mpirun detected that one or more processes exited with non-zero status, thus causing",
           "the job to be terminated. The first process to do so was:", "", "  Process name: [[14207,1],3]",
           "  Exit code:    1"]
    assert list(_verdict(tmp_path, {"train.log": log}).culprit.ranks) == [3]


def test_a_collectors_host_arrow_places_the_line_on_its_host(tmp_path):
    line = ("2025-10-21 14:12:21.391000 trn-w01 >> [rank11]:[E1021 14:12:21.391000492 ProcessGroupNCCL.cpp:632] "
            "[Rank 11] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, "
            "NumelIn=1724, NumelOut=1724, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.")
    hit = classify_line(line, 1, LineContext("job-all.log"))
    assert hit is not None and (hit.rank, hit.node) == (11, "trn-w01")
    assert classify_line("ValueError >> " + line[38:], 1, LineContext("job-all.log")).node is None


def test_gloo_finding_no_address_on_its_interface_is_that_hosts_network(tmp_path):
    log = [f"Wed Feb 17 14:36:52 2021[{r}]<stderr>:  what():  [enforce fail at gloo/transport/tcp/device.cc:83] ifa != "
           "nullptr. Unable to find address for: enp129s0f1" for r in range(8, 16)]
    log += ["ssh gpu-a14 -p 22 'HOROVOD_HOSTNAME=gpu-a14 HOROVOD_RANK=8 HOROVOD_SIZE=16 python train.py'"]
    v = _verdict(tmp_path, {"horovodrun_console.log": log})
    assert v.category is Category.NETWORK and v.restartable is False
