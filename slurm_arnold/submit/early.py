"""A placement solved before the site lock, kept when the cluster read inside the lock is as it
was: then the lock is held only to read the state and run sbatch, not for the solve.

Exact by construction: the answer is kept only where every input the solve read from Slurm
(the free nodes and those left after the queue's claims; the node table is read once, before
the lock, for both) is equal inside the lock, so it is the answer a solve there would give;
anything else is solved again under the lock. The early solve's log lines are held back and
shown only if its answer is kept, so a user never reads a line twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar

from slurm_arnold.errors import ArnoldError
from slurm_arnold.slurm import NodeInfo
from slurm_arnold.snapshot.view import ClusterView

T = TypeVar("T")


@dataclass
class EarlyAnswer(Generic[T]):
    """A solve's answer and what it was solved on."""

    nodes: dict[str, NodeInfo]
    cluster_free: frozenset[str]
    free: frozenset[str]
    answer: T
    records: list[logging.LogRecord]

    def holds(self, view: ClusterView, free: set[str]) -> bool:
        """Whether the cluster read now (``view``, ``free`` after the queue's claims) is the
        one this answer was solved on."""
        return (self.free == free and self.cluster_free == view.free
                and self.nodes == view.nodes)

    def take(self) -> T:
        """The answer, its log lines shown now."""
        for record in self.records:
            logging.getLogger(record.name).handle(record)
        return self.answer


def solve_early(view: ClusterView, free: set[str], solve: Callable[[], T]) -> EarlyAnswer[T] | None:
    """``solve()`` on ``view`` and ``free`` with its log lines held back; None where it raised
    an ``ArnoldError`` (too few free nodes, no placement): the solve under the lock decides
    then, on the cluster as it is there."""
    with _held_logs() as records:
        try:
            answer = solve()
        except ArnoldError:
            return None
    return EarlyAnswer(dict(view.nodes), frozenset(view.free), frozenset(free), answer, records)


def load_solver() -> None:
    """Import what the solve and the record load on first use (numpy, the MIP's modules,
    Slurm's reference rule: about 0.1 s) before the site lock, where every other submission
    would wait for it."""
    import slurm_arnold.explain
    import slurm_arnold.placement.arrange
    import slurm_arnold.placement.dominate
    import slurm_arnold.placement.regroup
    import slurm_arnold.placement.tiermip  # noqa: F401


@contextmanager
def _held_logs() -> Iterator[list[logging.LogRecord]]:
    """Every record logged meanwhile, kept in a list instead of reaching the handlers."""
    records: list[logging.LogRecord] = []

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    root = logging.getLogger()
    handlers = root.handlers[:]
    root.handlers = [_Keep()]
    try:
        yield records
    finally:
        root.handlers = handlers
