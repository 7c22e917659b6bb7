"""How `pytest -n 2 --dist loadfile` (scripts/test.sh) deals the test modules to its two processes.

Each process gets whole modules (their module-scoped fixtures, such as one torchrun fitting every strategy, are made
once), and every module that submits to the local Slurm cluster goes to one process, one after the other: its one
node runs one job at a time anyway, and the other process goes on with other modules instead of waiting in the queue.
(xdist's own `--dist loadgroup` marks do not group under pytest 9.2, which no longer reads the node ids xdist
rewrites.)

Modules are dealt longest first (`MODULE_SECONDS`, what each took in a measured run; an unmeasured one weighs as
the median measured module): xdist's own order, most tests first, left the quick start's few long tests and the Slurm group to
the end, where one process worked on while the other waited. `EOSCALE_TEST_DURATIONS=FILE` writes a run's module
seconds to FILE (the table's source: copy it to tests/module_seconds.json after a quiet full run).
"""

from __future__ import annotations

import json
import os
import statistics
from collections import Counter
from pathlib import Path

SECONDS_FILE = Path(__file__).with_name("module_seconds.json")
SLURM_GROUP = "local-slurm"


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


class Groups:
    """The scope of each module: itself, or the Slurm group for a module that uses the local Slurm cluster."""

    def __init__(self, rootpath: Path) -> None:
        self.rootpath = rootpath
        self._slurm: dict[str, bool] = {}

    def scope(self, module: str) -> str:
        if module not in self._slurm:
            path = self.rootpath / module
            self._slurm[module] = path.is_file() and "local_slurm" in path.read_text()
        return SLURM_GROUP if self._slurm[module] else module


def order_longest_first(items: list, groups: Groups) -> None:
    """`items` (pytest's, in place) with the scopes of the longest measured modules first; a stable sort, so each
    module's tests keep their order and stay together."""
    seconds = json.loads(SECONDS_FILE.read_text()) if SECONDS_FILE.exists() else {}
    # a module the table has not measured yet (a new one) weighs as the median measured module: dealt last, a
    # new slow module kept one process working while the other waited at the end
    unmeasured = statistics.median(seconds.values()) if seconds else 0.0
    for item in items:
        seconds.setdefault(module_of(item.nodeid), unmeasured)
    weight: Counter[str] = Counter()
    for module, value in seconds.items():
        weight[groups.scope(module)] += value
    items.sort(key=lambda item: -weight[groups.scope(module_of(item.nodeid))])


def make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    groups = Groups(config.rootpath)
    config.option.loadscopereorder = False  # deal in the order `order_longest_first` gave the collection

    class ByModule(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return groups.scope(module_of(nodeid))

    return ByModule(config, log)


class DurationLog:
    """Seconds (setup + call + teardown) of each module over a run, written at its end (`EOSCALE_TEST_DURATIONS`)."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.seconds: Counter[str] = Counter()

    def pytest_runtest_logreport(self, report) -> None:
        self.seconds[module_of(report.nodeid)] += report.duration

    def pytest_sessionfinish(self, session) -> None:
        if os.environ.get("PYTEST_XDIST_WORKER"):
            return  # the controller sees every worker's reports
        ordered = dict(sorted(((m, round(s, 1)) for m, s in self.seconds.items()), key=lambda kv: -kv[1]))
        self.path.write_text(json.dumps(ordered, indent=1) + "\n")
