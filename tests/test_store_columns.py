"""DatasetWriter.add_records' column conversion: bytes or str schedules (non-ASCII too), and duplicates
dropped from the ragged columns (costs, schedules) without shifting the rows around them."""

from __future__ import annotations

from costlab.datasets import DatasetWriter, RecordBatch, open_dataset, program_id


def _rows(names, costs_of):
    b = RecordBatch()
    for name in names:
        b.append(0, name, costs_of(name), 0, 1.0, program_id("ms", "w", name))
    return b


def test_mixed_schedule_types_and_duplicates(tmp_path):
    out = tmp_path / "d.h5"
    costs_of = {"a": [1.0], "b": [2.0, 2.5], "c": [], "dé→": [4.0, 4.5, 4.75], "e": [5.0]}.__getitem__
    with DatasetWriter(out) as w:
        w.add_platform("p", {"kind": "llvm"})
        w.add_task("w", "ms", "w")
        assert w.add_records("p", _rows(["a", "b", "a"], costs_of)) == (2, 1)  # duplicate inside the batch
        non_ascii = _rows(["c", "dé→", "b"], costs_of)  # "b" was added before
        assert w.add_records("p", non_ascii) == (2, 1)
        as_bytes = _rows(["e", "c"], costs_of)
        as_bytes.schedule = [s.encode() for s in as_bytes.schedule]
        assert w.add_records("p", as_bytes) == (1, 1)
    with open_dataset(out) as ds:
        t = ds.records("p")
        assert t.schedules() == ["a", "b", "c", "dé→", "e"]
        values, offsets = t.costs()
        assert [values[offsets[i]:offsets[i + 1]].tolist() for i in range(5)] == [
            costs_of(s) for s in ["a", "b", "c", "dé→", "e"]]
        assert t.program_id.tolist() == [program_id("ms", "w", s) for s in ["a", "b", "c", "dé→", "e"]]
