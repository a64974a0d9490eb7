"""What an import did: records added, duplicates skipped, bad lines skipped and counted."""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_PROBLEMS_SHOWN = 10


@dataclass
class ImportReport:
    files: int = 0
    lines: int = 0
    added: dict = field(default_factory=dict)  # platform -> records added
    duplicates: dict = field(default_factory=dict)  # platform -> records already present
    tasks: int = 0  # tasks in the dataset afterwards
    bad: int = 0  # bad lines / records skipped
    problems: list = field(default_factory=list)  # the first messages, "file:line: what"
    notes: list = field(default_factory=list)  # what else the import did that its user should know

    def problem(self, message: str) -> None:
        self.bad += 1
        if len(self.problems) < MAX_PROBLEMS_SHOWN:
            self.problems.append(message)

    @property
    def good(self) -> int:
        return sum(self.added.values()) + sum(self.duplicates.values())

    @property
    def usable(self) -> bool:
        """True when at least one record was read (new or already present)."""
        return self.good > 0

    def format(self) -> str:
        parts = [f"read {self.lines} lines from {self.files} file(s)"]
        for p in sorted(set(self.added) | set(self.duplicates)):
            parts.append(f"{p}: {self.added.get(p, 0)} records added, {self.duplicates.get(p, 0)} already present")
        parts.append(f"{self.tasks} tasks in the dataset")
        if self.bad:
            parts.append(f"{self.bad} bad line(s)/record(s) skipped")
        text = "; ".join(parts)
        for msg in self.problems:
            text += f"\n  skipped {msg}"
        if self.bad > len(self.problems):
            text += f"\n  ... and {self.bad - len(self.problems)} more"
        for note in self.notes:
            text += f"\n  note: {note}"
        return text
