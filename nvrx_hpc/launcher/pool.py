"""Which nodes of the allocation train, which wait as spares, and which are excluded."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["NodePool"]


@dataclass
class NodePool:
    """Active nodes run the training step; spares replace failed ones; excluded nodes are never used again."""

    active: list[str]
    spares: list[str]
    excluded: dict[str, str] = field(default_factory=dict)  # node -> why

    @classmethod
    def split(cls, nodes: list[str], spares: int, excluded: dict[str, str] | None = None) -> NodePool:
        usable = [n for n in nodes if n not in (excluded or {})]
        count = len(usable) - spares
        return cls(active=usable[:count], spares=usable[count:], excluded=dict(excluded or {}))

    def exclude(self, node: str, why: str) -> str | None:
        """Take `node` out for good; returns the spare that replaces it, or None when none is left."""
        self.excluded[node] = why
        if node in self.spares:
            self.spares.remove(node)
            return None
        if node not in self.active:
            return None
        position = self.active.index(node)
        if self.spares:
            spare = self.spares.pop(0)
            self.active[position] = spare  # same position: the same ranks move to the spare
            return spare
        self.active.pop(position)
        return None

    def to_dict(self) -> dict:
        return {"active": list(self.active), "spares": list(self.spares), "excluded": dict(self.excluded)}
