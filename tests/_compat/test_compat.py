"""eoscale._compat: version ranges, one-line refusals, the warning said once, and the optional extras."""

from __future__ import annotations

import sys
import warnings

import pytest

from eoscale._compat import Checked, MissingExtraError, UnsupportedVersionError, require_extra, warn_once
from eoscale.errors import UserError


def test_checked_range():
    checked = Checked("torch", "2.14", "2.15", "something private")
    assert checked.holds("2.14.1+cu130") and checked.holds("2.14.0")
    assert not checked.holds("2.15.0") and not checked.holds("2.13.9")
    assert checked.holds()  # the pinned torch


def test_outside_the_range_is_one_line_naming_package_and_version():
    checked = Checked("torch", "1.0", "1.1", "DataLoader._get_iterator")
    with pytest.raises(UnsupportedVersionError) as err:
        checked.require()
    message = str(err.value)
    assert "\n" not in message and "torch 2.14" in message and ">=1.0,<1.1" in message
    assert isinstance(err.value, UserError)


def test_fallback_is_said_once():
    checked = Checked("torch", "1.0", "1.1", "a private hook (test)")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert not checked.allowed("using the public path")
        assert not checked.allowed("using the public path")
    assert len([w for w in seen if "a private hook (test)" in str(w.message)]) == 1
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        warn_once("k-test", "x")
        warn_once("k-test", "x")
    assert len(seen) == 1


def test_a_missing_extra_names_what_to_install(monkeypatch):
    class Blocker:
        def find_spec(self, name, path=None, target=None):
            if name == "deepspeed" or name.startswith("deepspeed."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    monkeypatch.delitem(sys.modules, "deepspeed", raising=False)
    monkeypatch.setattr(sys, "meta_path", [Blocker(), *sys.meta_path])
    with pytest.raises(MissingExtraError) as err:
        require_extra("deepspeed")
    assert "eoscale[deepspeed]" in str(err.value) and "\n" not in str(err.value)
    assert require_extra("ray").__name__ == "ray.train"  # installed here: the module itself
