"""Comparing runs from MLflow: scaling efficiency, throughput, time and cost to a target mIoU (`eoscale compare`)."""

from eoscale.track.compare import (
    Comparison,
    RunRow,
    compare_runs,
    connect,
    find_runs,
    log_comparison,
    write_outputs,
)

__all__ = ["Comparison", "RunRow", "compare_runs", "connect", "find_runs", "log_comparison", "write_outputs"]
