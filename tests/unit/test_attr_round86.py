"""Rules from round 86 of blind cases (kept, scored, in tests/fixtures/attribution_pending/round86): a node's driver
stack out of step, a GPU the driver could not initialise, a node HPE's PALS launcher lost, Kubernetes killing a
container over its memory or evicting a pod over its disk, a process out of file descriptors, and a launcher's ssh
that could not resolve a worker."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category, Verdict


def _verdict(tmp_path, files: dict[str, list[str]]) -> Verdict:
    return analyze_run(write_run(tmp_path, files)).verdict


def test_a_nodes_driver_and_cuda_out_of_step_is_the_hosts(tmp_path):
    out = [f"{t}: RuntimeError: CUDA error: system has unsupported display driver / cuda driver combination"
           for t in (4, 5)]
    out += ["srun: error: jakku: tasks 4-5: Exited with exit code 1", "srun: error: kamino: tasks 0-3: Terminated"]
    v = _verdict(tmp_path, {"slurm-2871.out": out})
    assert v.category is Category.HOST and "jakku" in v.culprit.nodes and v.restartable is True


def test_nvml_saying_driver_library_mismatch_is_the_hosts(tmp_path):
    v = _verdict(tmp_path, {"h100-pool-b-07.journal.txt": [
        "Nov 04 08:41:09 h100-pool-b-07 kernel: NVRM: API mismatch: the client has the version 550.127.05, but this "
        "kernel module has the version 550.90.07."]})
    assert v.category is Category.HOST and v.culprit.nodes == ("h100-pool-b-07",)


def test_a_gpu_the_driver_could_not_initialise_is_the_gpus(tmp_path):
    v = _verdict(tmp_path, {"dmesg-trn-a100-1.txt": ["[  12.345678] NVRM: RmInitAdapter failed! (0x22:0x56:742)"]})
    assert v.category is Category.GPU_HARDWARE and v.culprit.nodes == ("trn-a100-1",)


def test_pals_losing_touch_with_a_node_names_the_silent_node(tmp_path):
    out = ["ping failed on x4102c3s0b0n0: No reply from x4209c5s1b0n0.hostmgmt2209.cm.aurora.alcf.anl.gov after 93s",
           "x4102c3s0b0n0.hostmgmt2102.cm.aurora.alcf.anl.gov: rank 0 died from signal 15"]
    v = _verdict(tmp_path, {"llm_pretrain.o4417093": out})
    assert v.category is Category.HOST and v.culprit.nodes == ("x4209c5s1b0n0",)


def test_pals_finding_the_application_gone_names_that_node(tmp_path):
    out = ["ping failed on x4616c0s4b0n0: Application 8e21c6d4-7b0f-4c3a-9a51-2f6e0d94b1c7 not found"]
    v = _verdict(tmp_path, {"vit_sweep.o5120388": out})
    assert v.category is Category.HOST and v.culprit.nodes == ("x4616c0s4b0n0",)


def test_kubernetes_oom_killing_a_pod_is_its_memory_not_the_network(tmp_path):
    pods = ["NAME                     READY   STATUS      RESTARTS   AGE",
            "gpt-efa-worker-0         1/1     Running     0          14m",
            "gpt-efa-worker-2         0/1     OOMKilled   0          14m"]
    v = _verdict(tmp_path, {"kubectl_get_pods.txt": pods})
    assert v.category is Category.HOST and v.culprit.nodes == ("gpt-efa-worker-2",) and v.restartable is False


def test_a_pod_over_its_ephemeral_storage_is_evicted_for_its_own_disk(tmp_path):
    ev = ["  Warning  Evicted  2m  kubelet  Pod ephemeral local storage usage exceeds the total limit of containers "
          "5Gi."]
    v = _verdict(tmp_path, {"kubectl_describe_pod.txt": ev})
    assert v.category is Category.HOST and v.restartable is False


def test_a_process_out_of_file_descriptors_is_the_nodes_limit(tmp_path):
    out = ["gpub3a6: OSError: [Errno 24] Too many open files", "gpub3a6: RuntimeError: Pin memory thread exited "
           "unexpectedly"]
    v = _verdict(tmp_path, {"train.log": out})
    assert v.category is Category.HOST and v.culprit.nodes == ("gpub3a6",) and v.restartable is False


def test_a_launchers_ssh_that_cannot_resolve_a_worker_names_the_worker(tmp_path):
    out = ["ssh: Could not resolve hostname seg-hvd-mpiworker-5.seg-hvd: Name or service not known",
           "ORTE was unable to reliably start one or more daemons."]
    v = _verdict(tmp_path, {"mpimaster-0.log": out})
    assert v.category is Category.NETWORK and v.culprit.nodes == ("seg-hvd-mpiworker-5",)


def test_the_worker_ray_says_died_is_the_rank_its_table_gives_the_dead_actors_pid(tmp_path):
    out = [f"(TorchTrainer pid=1876, ip=10.1.4.21) - (ip=10.1.4.2{n}, pid={1940 + r}) world_rank={r}, "
           f"local_rank={r % 2}" for r, n in ((0, 1), (1, 1), (2, 3), (3, 3))]
    out += ["2023-01-17 17:21:35,472\tWARNING worker.py:1829 -- A worker died or was killed while executing a task by "
            "an unexpected system error.", "\tclass_name: RayTrainWorker",
            "\tactor_id: 9f14a9c36c7c0b4cd8b4a1f904000000", "\tpid: 1943", "\tip: 10.1.4.23",
            "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: "
            "Worker unexpectedly exits with a connection error code 2. End of file. There are some potential root "
            "causes. (1) The process is killed by SIGKILL by OOM killer due to high memory usage."]
    v = _verdict(tmp_path, {"driver.log": out})
    assert v.culprit.ranks == (3,) and "10.1.4.23" in v.culprit.nodes
