"""Ray Train's private names eoscale relies on (checked on ray 2.60).

- `ray.train.v2._internal.execution.context.get_train_context().get_result_queue()`: the worker's queue of reports
  not yet taken by the controller (`wait_until_reported`).

Ray is the optional extra `eoscale[ray]`: `import_ray_train()` imports it or raises a one-line error naming it.
"""

from __future__ import annotations

from types import ModuleType

from eoscale._compat import Checked, require_extra

CHECKED = Checked("ray", "2.60", "2.61", "ray.train.v2._internal's result queue")


def import_ray_train() -> ModuleType:
    """`ray.train`, or `MissingExtraError` naming `eoscale[ray]`."""
    return require_extra("ray")


def wait_until_reported() -> None:
    """Block until Ray's controller has taken this worker's last report.

    `ray.train.report` only queues the report in the worker; the controller takes it when it next polls the
    workers (every 2 s) and registers the checkpoint once every rank's report is in. A worker lost in between
    loses its queued report, and Ray restarted the group from the checkpoint before (in the Ray tests, a worker
    killed one step after a report restarted from step 0 under load). Waiting costs at most one poll interval a
    checkpoint. Outside the checked versions, or if the queue moved, the wait is skipped (said once) and the old
    behaviour comes back, never an error."""
    if not CHECKED.allowed("the wait for Ray's controller to take each checkpoint report is skipped"):
        return
    try:
        from ray.train.v2._internal.execution.context import get_train_context

        result_queue = get_train_context().get_result_queue()
    except (ImportError, AttributeError, RuntimeError):
        return
    result_queue.join()  # the controller's poll calls task_done() when it takes the report
