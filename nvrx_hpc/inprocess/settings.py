"""What the in-process wrapper learns from the environment `nvrx-hpc run --inprocess` gives each task."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from nvrx_hpc.core.errors import ConfigError

__all__ = ["InprocessSettings", "ENV_STORE", "ENV_WORLD", "ENV_TASKS_PER_NODE", "ENV_SPARES_PER_NODE",
           "ENV_SPARE_NODES", "ENV_SLOT_BASE", "namespace"]

ENV_STORE = "NVRX_IP_STORE"  # HOST:PORT of the job's TCPStore (the launcher's side process)
ENV_WORLD = "NVRX_IP_WORLD"  # ranks that train (tasks less the spare ranks)
ENV_TASKS_PER_NODE = "NVRX_IP_TASKS_PER_NODE"  # training ranks per node
ENV_SPARES_PER_NODE = "NVRX_IP_SPARES_PER_NODE"  # warm spare ranks per node, after the training ranks
# The step's nodes (by their place in the step) whose every task is a spare: the allocation's spare nodes,
# so that a lost node's ranks move to a healthy node without a new step.
ENV_SPARE_NODES = "NVRX_IP_SPARE_NODES"
# A refill task's first slot (nvrx_hpc.launcher.refill): its slot is this plus its task id in the refill step.
ENV_SLOT_BASE = "NVRX_IP_SLOT_BASE"
ENV_SOFT = "NVRX_IP_SOFT_TIMEOUT_S"
ENV_HARD = "NVRX_IP_HARD_TIMEOUT_S"
ENV_PG_TIMEOUT = "NVRX_IP_PG_TIMEOUT_S"
ENV_MAX_ROUNDS = "NVRX_IP_MAX_RESTARTS"


def namespace(job: str, restart: int | str) -> str:
    """The store keys of one training step's rounds: a later step (in-allocation restart) starts clean."""
    return f"nvrx-ip/{job}/{restart}"


@dataclass(frozen=True)
class InprocessSettings:
    """One task's place and the wrapper's limits.

    `slot` is the task's fixed identity (its Slurm task id, which the agent and launcher know it by); its
    torch rank can change from one round to the next when a spare takes a lost rank's place.
    """

    store_host: str
    store_port: int
    slot: int
    world_size: int
    per_node: int  # training ranks per node
    spares_per_node: int
    namespace: str  # keys of this step's rounds: a later step (in-allocation restart) starts clean
    soft_timeout_s: float = 5.0  # a rank missing from the rendezvous this long is declared lost
    hard_timeout_s: float = 60.0  # a rank that cannot rejoin within this exits (INPROCESS_ESCALATE)
    pg_timeout_s: float = 30.0  # collectives: a peer that hangs this long fails the round
    max_restarts: int = 50
    spare_nodes: tuple[int, ...] = ()  # places in the step of the nodes that only hold spare tasks
    refill: bool = False  # a task of a refill step: it joins the running job as a spare (rendezvous.py)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> InprocessSettings:
        """From `nvrx-hpc run --inprocess` (NVRX_IP_*, SLURM_PROCID/NODEID/LOCALID).

        Raises:
            ConfigError: a variable is missing or not a number (the training was not started that way).
        """
        env = os.environ if env is None else env
        host, sep, port = env.get(ENV_STORE, "").rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ConfigError(
                f"{ENV_STORE}={env.get(ENV_STORE, '')!r} is not HOST:PORT: in-process restart needs the job's store",
                hint="start the training with `nvrx-hpc run --inprocess -- python train.py`",
            )
        try:
            base = int(env.get(ENV_SLOT_BASE) or "0")
            slot = int(env.get("SLURM_PROCID") or env.get("RANK") or "0") + base
            world = int(env.get(ENV_WORLD) or env.get("WORLD_SIZE") or "1")
            per_node = int(env.get(ENV_TASKS_PER_NODE) or str(world))
            spares = int(env.get(ENV_SPARES_PER_NODE) or "0")
            restart = int(env.get("NVRX_RESTART_COUNT") or "0")
            spare_nodes = tuple(int(i) for i in (env.get(ENV_SPARE_NODES) or "").split(",") if i.strip())
            limits = {
                "soft_timeout_s": float(env.get(ENV_SOFT) or cls.soft_timeout_s),
                "hard_timeout_s": float(env.get(ENV_HARD) or cls.hard_timeout_s),
                "pg_timeout_s": float(env.get(ENV_PG_TIMEOUT) or cls.pg_timeout_s),
                "max_restarts": int(env.get(ENV_MAX_ROUNDS) or cls.max_restarts),
            }
        except ValueError as exc:
            raise ConfigError(f"in-process restart: a task variable is not a number: {exc}") from None
        if world < 1 or per_node < 1 or spares < 0 or slot < 0 or base < 0 or any(i < 0 for i in spare_nodes):
            raise ConfigError(f"in-process restart: bad task layout (world {world}, {per_node} per node, "
                              f"{spares} spares per node, slot {slot})")
        return cls(
            store_host=host, store_port=int(port), slot=slot, world_size=world, per_node=per_node,
            spares_per_node=spares, spare_nodes=spare_nodes, refill=base > 0,
            namespace=namespace(env.get("SLURM_JOB_ID", "0"), restart), **limits,
        )  # fmt: skip

    def first_plan(self) -> dict[int, int]:
        """Slot -> rank of the first round. Slurm numbers a node's tasks together (block distribution): on
        each training node the first `per_node` tasks train and the rest wait as spares; every task of a
        spare node waits."""
        width = self.per_node + self.spares_per_node
        plan: dict[int, int] = {}
        trained = 0  # training nodes before this one
        for node in range(len(self.all_slots()) // width):
            if node in self.spare_nodes:
                continue
            for local in range(self.per_node):
                rank = trained * self.per_node + local
                if rank < self.world_size:
                    plan[node * width + local] = rank
            trained += 1
        return plan

    def all_slots(self) -> range:
        nodes = -(-self.world_size // self.per_node) + len(self.spare_nodes)
        return range(nodes * (self.per_node + self.spares_per_node))
