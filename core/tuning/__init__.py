"""Tuning: records of measured schedules and their database, workloads that worker processes
rebuild, isolated measurement of candidates, budgets and presets, the event stream and the
progress display."""

from tilecraft.tuning.budget import PRESETS, Budget, TuningOptions, open_event_stream
from tilecraft.tuning.builders import DEFAULT_BUILDER, lower_trace
from tilecraft.tuning.candidate import (
    MeasureInput,
    MeasureResult,
    MeasureSettings,
    Stage,
    evaluate_in_process,
)
from tilecraft.tuning.database import SCHEMA_VERSION, TuningDatabase
from tilecraft.tuning.events import (
    EventKind,
    EventStream,
    JsonLinesWriter,
    TuningEvent,
    read_events,
)
from tilecraft.tuning.measure import Measurer
from tilecraft.tuning.progress import ProgressDisplay
from tilecraft.tuning.record import ErrorKind, TuningRecord, canonical_json, workload_key
from tilecraft.tuning.workload import TuningError, Workload, WorkloadInstance, flop_count

__all__ = ["DEFAULT_BUILDER", "PRESETS", "SCHEMA_VERSION", "Budget", "ErrorKind", "EventKind",
           "EventStream", "JsonLinesWriter", "MeasureInput", "MeasureResult", "MeasureSettings",
           "Measurer", "ProgressDisplay", "Stage", "TuningDatabase", "TuningError",
           "TuningEvent", "TuningOptions", "TuningRecord", "Workload", "WorkloadInstance",
           "canonical_json", "evaluate_in_process", "flop_count", "lower_trace",
           "open_event_stream", "read_events", "workload_key"]
