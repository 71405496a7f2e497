"""A node agent under sustained heartbeat load: does it lose any, and what does it cost in CPU?

    python benchmarks/agent_load.py [--seconds 600] [--rate 1000] [--ranks 10] [--json]

A real `nvrx-hpc agent` process reports to a real launcher hub (nvrx_hpc.launcher.hub.AgentHub, in this
process). `--ranks` simulated ranks connect to the agent's Unix socket, say `w.hello` and then send one
authenticated `w.hb` frame per beat (beats 1, 2, 3, ... with no coalescing), `--rate` frames per second
in all, for `--seconds`. Then:

- lost: for each rank, beats sent minus the last beat count the agent reported to the launcher
  (`ag.status`); 0 means every heartbeat reached the agent and was counted, in order;
- disconnects: rank connections that broke (a send that timed out, the agent closing the socket);
- agent CPU: the agent process's user+system CPU seconds over the loaded period, as a share of one
  core, next to the same share measured while idle with the ranks connected (the baseline);
- the largest `last_beat_age` the launcher saw for any rank during the load (the agent kept up).

`--json` prints the same figures as one JSON object. tests/cluster/test_faults_load.py runs it for 60 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from nvrx_hpc.core.wire import Codec, new_token, save_token  # noqa: E402
from nvrx_hpc.launcher.hub import AgentHub  # noqa: E402

NODE = "load1"
SEND_TIMEOUT_S = 2.0  # what the worker API allows a send before it calls the agent gone


class Rank(threading.Thread):
    """One simulated rank: w.hello, then paced w.hb frames, one per beat."""

    def __init__(self, rank: int, path: str, codec: Codec, rate: float, start_at: float, stop_at: float) -> None:
        super().__init__(daemon=True, name=f"load-rank{rank}")
        self.rank, self.path, self.codec, self.rate = rank, path, codec, rate
        self.start_at, self.stop_at = start_at, stop_at
        self.sent = 0
        self.error: str | None = None

    def run(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(SEND_TIMEOUT_S)
        try:
            sock.connect(self.path)
            hello = {"type": "w.hello", "rank": self.rank, "local_rank": self.rank, "pid": os.getpid(),
                     "restart": 0, "t": time.time()}  # fmt: skip
            sock.sendall(self.codec.encode(hello))
            while time.monotonic() < self.start_at:
                time.sleep(0.01)
            while True:
                now = time.monotonic()
                if now >= self.stop_at:
                    break
                due = int((now - self.start_at) * self.rate) + 1  # beats that should be out by now
                frames = []
                while self.sent < due:
                    self.sent += 1
                    frames.append(self.codec.encode({"type": "w.hb", "rank": self.rank, "beats": self.sent,
                                                     "t": time.time()}))  # fmt: skip
                if frames:
                    sock.sendall(b"".join(frames))
                time.sleep(max(0.0, self.start_at + self.sent / self.rate - time.monotonic()))
            sock.sendall(self.codec.encode({"type": "w.bye", "rank": self.rank}))
        except OSError as exc:
            self.error = f"rank {self.rank}: {exc!r} after {self.sent} beats"
        finally:
            sock.close()


def _cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


async def measure(seconds: float, rate: float, ranks: int, idle_s: float = 3.0) -> dict:
    with tempfile.TemporaryDirectory(prefix="nvrx-load-") as tmp:
        token_file = Path(tmp) / "token"
        token = new_token()
        save_token(token_file, token)
        sock_path = str(Path(tmp) / "agent.sock")
        hub = AgentHub(token, host="127.0.0.1", job="load")
        port = await hub.start()
        agent = subprocess.Popen(  # noqa: S603 - our own module, argv list
            [sys.executable, "-m", "nvrx_hpc", "agent", "--launcher", f"127.0.0.1:{port}", "--token-file",
             str(token_file), "--socket", sock_path, "--node", NODE, "--health-interval", "0"],
            env={**os.environ, "SLURM_JOB_ID": "load", "PYTHONPATH": str(REPO)}, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            if await hub.wait_for_agents([NODE], 60):
                raise SystemExit("the agent never reported to the hub")
            while not os.path.exists(sock_path):
                await asyncio.sleep(0.05)
            proc = psutil.Process(agent.pid)
            codec = Codec(token)
            start_at = time.monotonic() + idle_s + 1.0
            threads = [Rank(r, sock_path, codec, rate / ranks, start_at, start_at + seconds) for r in range(ranks)]
            for t in threads:
                t.start()
            await asyncio.sleep(1.0)  # connected and registered
            idle0, idle_t0 = _cpu_seconds(proc), time.monotonic()
            await asyncio.sleep(max(0.0, start_at - time.monotonic()))
            idle_cpu = (_cpu_seconds(proc) - idle0) / (time.monotonic() - idle_t0)
            busy0, busy_t0 = _cpu_seconds(proc), time.monotonic()
            worst_age = 0.0
            while any(t.is_alive() for t in threads):
                await asyncio.sleep(1.0)
                link = hub.agents.get(NODE)
                ages = [r.get("last_beat_age") or 0.0 for r in (link.ranks.values() if link else [])]
                worst_age = max([worst_age, *ages])
            busy_cpu = (_cpu_seconds(proc) - busy0) / (time.monotonic() - busy_t0)
            sent = {t.rank: t.sent for t in threads}
            seen: dict[int, int] = {}
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:  # the agent reports every second
                link = hub.agents.get(NODE)
                seen = {int(r): int(v.get("beats") or 0) for r, v in (link.ranks.items() if link else [])}
                if all(seen.get(r) == n for r, n in sent.items()):
                    break
                await asyncio.sleep(0.2)
            total = sum(sent.values())
            return {
                "seconds": seconds, "rate_asked": rate, "ranks": ranks, "sent": total,
                "rate_sent": round(total / seconds, 1),
                "lost": sum(n - seen.get(r, 0) for r, n in sent.items()),
                "lost_by_rank": {r: n - seen.get(r, 0) for r, n in sent.items() if n != seen.get(r, 0)},
                "disconnects": [t.error for t in threads if t.error], "rejected_by_hub": hub.rejected,
                "agent_alive": agent.poll() is None, "agent_cpu_share": round(busy_cpu, 4),
                "agent_idle_cpu_share": round(idle_cpu, 4),
                "cpu_us_per_message": round(1e6 * (busy_cpu - idle_cpu) / max(1.0, total / seconds), 2),
                "worst_last_beat_age_s": round(worst_age, 3),
            }  # fmt: skip
        finally:
            agent.terminate()
            try:
                agent.wait(10)
            except subprocess.TimeoutExpired:
                agent.kill()
            await asyncio.sleep(0.5)  # the hub sees the link close before it shuts down
            await hub.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=600.0, help="how long the load lasts (default 600)")
    p.add_argument("--rate", type=float, default=1000.0, help="heartbeat frames per second in all (default 1000)")
    p.add_argument("--ranks", type=int, default=10, help="simulated ranks sharing the rate (default 10)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args()
    if args.seconds <= 0 or args.rate <= 0 or args.ranks < 1:
        p.error("--seconds and --rate must be > 0, --ranks >= 1")
    result = asyncio.run(measure(args.seconds, args.rate, args.ranks))
    if args.json:
        print(json.dumps(result))
        return
    print(f"{result['sent']} heartbeats from {args.ranks} ranks in {args.seconds:g} s ({result['rate_sent']}/s): "
          f"lost {result['lost']}, disconnects {len(result['disconnects'])}")
    print(f"agent CPU: {100 * result['agent_cpu_share']:.1f} % of one core under load, "
          f"{100 * result['agent_idle_cpu_share']:.1f} % idle; {result['cpu_us_per_message']} us per message")
    print(f"largest heartbeat age the launcher saw: {result['worst_last_beat_age_s']} s")


if __name__ == "__main__":
    main()
