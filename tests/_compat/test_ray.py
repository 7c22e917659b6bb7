"""Ray Train's private names eoscale uses (`eoscale._compat.ray`) are there in the installed version."""

from __future__ import annotations

import warnings

from eoscale._compat import ray as compat


def test_installed_ray_is_the_checked_one():
    assert compat.CHECKED.holds()


def test_the_result_queue_is_where_eoscale_looks():
    compat.import_ray_train()
    from ray.train.v2._internal.execution.context import get_train_context

    assert callable(get_train_context)


def test_outside_a_train_worker_the_wait_returns_at_once():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # in range: no fallback warning
        compat.wait_until_reported()
