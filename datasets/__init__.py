"""costlab.datasets: the HDF5 dataset format and the ways in (MetaSchedule databases, Ansor/TenSet logs,
measurements costlab takes itself) and out (MetaSchedule databases)."""

from costlab.datasets.records import RecordBatch, mean_latency, program_id, scores
from costlab.datasets.splits import Split, make_split
from costlab.datasets.store import Dataset, DatasetWriter, Platform, Task, TaskRecords, open_dataset
from costlab.datasets.summary import summarize

__all__ = [
    "RecordBatch", "mean_latency", "program_id", "scores", "Split", "make_split", "Dataset", "DatasetWriter",
    "Platform", "Task", "TaskRecords", "open_dataset", "summarize",
]
