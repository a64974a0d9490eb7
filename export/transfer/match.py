"""Which source tasks a task takes schedules from, by the form of its computation.

A task's *structure* is its blocks in program order, each with a signature of its iterators and what it
computes (``metaschedule.structure.block_signature``), and its anchor block (the kernel class's block: the
reduction with the most FLOPs). Two tasks match

- ``same`` when every block has the signature of the source's block at the same position: the whole trace
  replays, blocks renamed position by position (names differ between TVM's te workloads, Relax and
  hand-written TIR);
- ``anchor`` when only the anchor block's signature is the same (other fused epilogues or prologues): the
  source's trace is applied to the anchor as MetaSchedule's ``schedule_using_anchor_trace`` does, the other
  blocks inlined or parallelised.

Shapes never matter to a match: tile decisions are adapted to the new extents when the trace is replayed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from costlab.metaschedule.structure import block_structure


@dataclass(frozen=True)
class Structure:
    names: tuple
    signatures: tuple
    anchor: int  # position of the anchor block, -1 without one
    extents: tuple = ()  # the anchor's iterator extents (how close two tasks' shapes are)

    @property
    def anchor_signature(self) -> str | None:
        return self.signatures[self.anchor] if self.anchor >= 0 else None

    @property
    def key(self) -> str:
        """The task's transfer class: the anchor's signature, then the other blocks' in order."""
        rest = [s for i, s in enumerate(self.signatures) if i != self.anchor]
        return f"{self.anchor_signature}|{';'.join(rest)}"


def structure(mod) -> Structure:
    names, sigs, anchor, extents = block_structure(mod)
    return Structure(tuple(names), tuple(sigs), anchor, tuple(extents))


@dataclass(frozen=True)
class Match:
    kind: str  # "same" or "anchor"
    names: dict = field(default_factory=dict)  # source block name -> the task's block name


def match(source: Structure, task: Structure) -> Match | None:
    """How a source task's schedules apply to ``task``, or None when they do not."""
    if source.anchor < 0 or task.anchor < 0 or source.anchor_signature != task.anchor_signature:
        return None
    if source.signatures == task.signatures:
        return Match("same", {a: b for a, b in zip(source.names, task.names) if a != b})
    names = {}
    if source.names[source.anchor] != task.names[task.anchor]:
        names[source.names[source.anchor]] = task.names[task.anchor]
    # blocks before the anchor with the same signatures (padding) keep their instructions too
    for i in range(1, min(source.anchor, task.anchor) + 1):
        a, b = source.anchor - i, task.anchor - i
        if source.signatures[a] != task.signatures[b]:
            break
        if source.names[a] != task.names[b]:
            names[source.names[a]] = task.names[b]
    return Match("anchor", names)
