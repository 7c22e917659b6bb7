"""The test processes get the longest modules first (tests/schedule.py), each module's tests kept together and in order,
the Slurm modules as one group."""

from __future__ import annotations

import json
from types import SimpleNamespace

from tests import schedule


def test_modules_are_dealt_longest_first_and_a_modules_tests_stay_together(tmp_path, monkeypatch):
    (tmp_path / "tests").mkdir()
    for name, text in {"a.py": "", "b.py": "", "c.py": "def test(local_slurm): ...", "d.py": "local_slurm"}.items():
        (tmp_path / "tests" / name).write_text(text)
    seconds = tmp_path / "seconds.json"
    # c and d (Slurm) weigh 30 together, b 20, a 5; e is unmeasured: the median module, 15
    seconds.write_text(json.dumps({"tests/a.py": 5, "tests/b.py": 20, "tests/c.py": 10, "tests/d.py": 20}))
    monkeypatch.setattr(schedule, "SECONDS_FILE", seconds)
    ids = ["tests/a.py::t1", "tests/a.py::t2", "tests/b.py::t1", "tests/c.py::t1", "tests/e.py::t1", "tests/d.py::t1",
           "tests/d.py::t2"]
    items = [SimpleNamespace(nodeid=i) for i in ids]
    schedule.order_longest_first(items, schedule.Groups(tmp_path))
    assert [i.nodeid for i in items] == ["tests/c.py::t1", "tests/d.py::t1", "tests/d.py::t2", "tests/b.py::t1",
                                         "tests/e.py::t1", "tests/a.py::t1", "tests/a.py::t2"]
