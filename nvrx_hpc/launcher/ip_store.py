"""The job's store for in-process restart: a torch TCPStore in a side process of the launcher.

The ranks meet there between rounds (nvrx_hpc.inprocess.rendezvous). It lives beside the launcher, not
in rank 0, so that it outlives any rank. `python -m nvrx_hpc.launcher.ip_store` prints its port and
serves until its stdin closes (the launcher exited or closed it). The launcher writes its own keys (the
refill slots, nvrx_hpc.launcher.refill) as JSON lines `{"set": [KEY, VALUE]}` on that stdin, so that it
needs no torch itself. Like torch.distributed's own
MASTER_PORT store it takes no authentication: anyone who can reach the port can write keys, so it lives
only as long as the launcher (docs/security.md).
"""

from __future__ import annotations

import asyncio
import json
import sys

from nvrx_hpc.core.errors import NvrxError

__all__ = ["StoreProcess"]

START_S = 60.0  # importing torch on a loaded node


class StoreProcess:
    def __init__(self) -> None:
        self.proc: asyncio.subprocess.Process | None = None
        self.port = 0

    async def start(self) -> int:
        """Start it and return its port. Raises NvrxError when torch is missing or it does not come up."""
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "nvrx_hpc.launcher.ip_store", stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), START_S)
        except asyncio.TimeoutError:
            line = b""
        if not line.strip().isdigit():
            err = b""
            if self.proc.returncode is not None or self.proc.stderr is not None:
                await self.stop()
                err = await self.proc.stderr.read() if self.proc.stderr is not None else b""
            raise NvrxError(
                "in-process restart needs the job's store, which did not start: "
                + (err.decode(errors="replace").strip().splitlines() or ["no port within 60 s"])[-1],
                hint="install torch where `nvrx-hpc run` runs, or run without --inprocess",
            )
        self.port = int(line)
        return self.port

    def set(self, key: str, value: str) -> None:
        """Write one key of the store (buffered: the side process sets it within milliseconds)."""
        if self.proc is None or self.proc.stdin is None or self.proc.returncode is not None:
            return
        self.proc.stdin.write((json.dumps({"set": [key, value]}) + "\n").encode())

    async def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 5)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()


def main() -> None:
    import torch.distributed as dist

    store = dist.TCPStore("0.0.0.0", 0, is_master=True, wait_for_workers=False)
    sys.stdout.write(f"{store.port}\n")
    sys.stdout.flush()
    for line in iter(sys.stdin.buffer.readline, b""):  # until the launcher closes our stdin or goes away
        try:
            key, value = json.loads(line)["set"]
        except (ValueError, KeyError, TypeError):
            continue  # only the launcher writes here; a torn line is dropped, never fatal
        store.set(str(key), str(value))


if __name__ == "__main__":
    main()
