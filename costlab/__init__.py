"""costlab: learned cost models for tensor-program tuning in Apache TVM MetaSchedule."""

__version__ = "0.1.0"
