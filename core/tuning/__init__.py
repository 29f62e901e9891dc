"""Tuning state that outlives a process: records of measured schedules and their database."""

from tilecraft.tuning.database import SCHEMA_VERSION, TuningDatabase
from tilecraft.tuning.record import ErrorKind, TuningRecord, canonical_json, workload_key

__all__ = ["SCHEMA_VERSION", "ErrorKind", "TuningDatabase", "TuningRecord", "canonical_json",
           "workload_key"]
