"""Synthetic training logs for the scanner benchmark and the demo: Megatron/NCCL-shaped healthy lines
with rare failure lines, reproducible from a seed. Nothing here is used to analyse a real job."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

__all__ = ["healthy_lines", "write_log", "FAILURE_LINES"]

# One failure line per family, injected rarely: what the scanner must find among healthy lines.
FAILURE_LINES = (
    "[rank{r}]:[E1016 03:31:38.928 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=9141, OpType=ALLREDUCE, NumelIn=19008, NumelOut=19008, Timeout(ms)=600000) ran for "
    "600071 milliseconds before timing out.",
    "[ 9321.112] NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus.",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB",
    "srun: error: n{n}: task {r}: Exited with exit code 1",
    " iteration   {it}/ 100000 | consumed samples: 1228800 | lm loss: nan | grad norm: nan | number of nan "
    "iterations: 1 |",
    "ValueError: shape mismatch: expected [4, 8], got [4, 9]",
    "n{n}:3456:3501 [3] NCCL WARN NET/IB : Got completion from peer 10.0.0.7<40213> with status=12 opcode=0",
)


def healthy_lines(rng: random.Random) -> Iterator[str]:
    """An endless stream of healthy log lines (iteration summaries, NCCL INFO, checkpoint and data lines)."""
    it = 0
    while True:
        it += 1
        r = rng.randrange(1024)
        kind = rng.random()
        if kind < 0.45:
            yield (
                f" iteration {it:>8}/  500000 | consumed samples: {it * 1024:>12} | elapsed time per iteration (ms): "
                f"{1200 + rng.random() * 80:.1f} | learning rate: 1.000E-04 | global batch size:  1024 | lm loss: "
                f"{2 + rng.random():.6E} | loss scale: 1.0 | grad norm: {rng.random():.3f} | number of skipped "
                "iterations:   0 | number of nan iterations:   0 |"
            )
        elif kind < 0.75:
            yield (
                f"n{r // 8}:{3000 + r}:{3100 + r} [{r % 8}] NCCL INFO Channel {r % 32:02d}/0 : {r}[{r % 8}] -> "
                f"{(r + 1) % 1024}[{(r + 1) % 8}] via P2P/IPC/read"
            )
        elif kind < 0.9:
            yield (
                f"[2024-05-01 12:{(it // 60) % 60:02d}:{it % 60:02d},{rng.randrange(1000):03d}] [INFO] "
                f"[data_samplers.py:{rng.randrange(400)}] rank {r}: loaded shard {rng.randrange(10**6)} "
                f"of dataset /lustre/data/tokens_{rng.randrange(64):02d}.bin in {rng.random() * 3:.3f} s"
            )
        else:
            yield (
                f"[2024-05-01 12:{(it // 60) % 60:02d}:{it % 60:02d}] [INFO] [checkpointing.py:{rng.randrange(900)}]"
                f" rank {r}: async checkpoint shard {rng.randrange(64)} written to /ckpt/iter_{it:07d} "
                f"({rng.random() * 900:.1f} MB/s)"
            )


def write_log(path: Path, size_mb: float, *, seed: int = 0, error_rate: float = 0.0005, label: bool = True) -> int:
    """Write a log of about `size_mb` MB (10^6 bytes) to `path`; return the number of failure lines injected.

    With `label`, each line carries an `srun --label` prefix (`<rank>: `).
    """
    rng = random.Random(seed)
    target = int(size_mb * 1_000_000)
    written = injected = 0
    lines = healthy_lines(rng)
    buf: list[str] = []
    with open(path, "w", encoding="utf-8") as out:
        while written < target:
            r = rng.randrange(1024)
            if rng.random() < error_rate:
                line = rng.choice(FAILURE_LINES).format(r=r, n=r // 8, it=rng.randrange(10**5))
                injected += 1
            else:
                line = next(lines)
            if label:
                line = f"{r}: {line}"
            buf.append(line)
            written += len(line) + 1
            if len(buf) >= 4096:
                out.write("\n".join(buf) + "\n")
                buf.clear()
        if buf:
            out.write("\n".join(buf) + "\n")
    return injected
