"""Shell prompts in a pasted terminal session place the output of node-local commands on the prompt's host
(or on `ssh`'s target); a job log read from shared storage on a login node is placed nowhere."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category
from nvrx_hpc.attribution.prompts import prompt_hosts

_XID = "[Tue Mar  4 10:02:11 2025] NVRM: Xid (PCI:0000:9b:00): 79, pid=48811, GPU has fallen off the bus."
_SLURM = ["[rank5]: step 1200 loss 2.31", "[rank5]: RuntimeError: CUDA error: unspecified launch failure",
          "srun: error: Timed out waiting for job step to complete"]


def test_dmesg_under_a_prompt_is_the_prompts_host(tmp_path):
    paste = ["[kvoss@gpu-c03 ~]$ sudo dmesg -T | grep -i xid", _XID, "[kvoss@gpu-c03 ~]$ exit"]
    v = analyze_run(write_run(tmp_path, {"slurm-881.out": _SLURM, "what_i_saw.txt": paste})).verdict
    assert v.category is Category.GPU_HARDWARE and v.culprit.nodes == ("gpu-c03",)


def test_ssh_places_the_output_on_its_target_not_the_login_node(tmp_path):
    paste = ["hb@login2:~$ ssh gpu-c02 'dmesg -T | tail -3'", _XID]
    v = analyze_run(write_run(tmp_path, {"slurm-881.out": _SLURM, "session.txt": paste})).verdict
    assert v.culprit.nodes == ("gpu-c02",)


def test_a_job_log_read_on_a_login_node_is_not_placed_there():
    data = (b"[hb@login2 run]$ tail -5 slurm-881.out\n" + _XID.encode() + b"\n"
            b"[hb@login2 run]$ grep Xid /lustre/hb/run/node.log\n" + _XID.encode() + b"\n"
            b"(venv) root@gpu-c04:/var/log# journalctl -k --since today\n")
    assert prompt_hosts(data) == [(1, None), (3, None), (5, "gpu-c04")]


def test_an_email_address_or_a_host_prefix_is_no_prompt():
    assert prompt_hosts(b"contact ops@gpu-c03: node drained\ngpu-c03: $ 5 spent\n") == []
