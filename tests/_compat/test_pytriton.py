"""The PyTriton proxy patch (eoscale._compat.pytriton) against the installed PyTriton's own proxy source."""

from __future__ import annotations

from pathlib import Path

import pytest

from eoscale._compat import pytriton as compat


def test_installed_pytriton_is_the_checked_one():
    assert compat.CHECKED.holds(), f"nvidia-pytriton {compat.CHECKED.installed()} is outside {compat.CHECKED.range}"


def test_the_installed_proxy_is_patched_and_still_compiles():
    import pytriton.proxy

    source = (Path(pytriton.proxy.__file__).parent / compat.PROXY_FILE).read_text()
    patched = compat.patch_proxy(source)
    assert "_eoscale_as_numpy(input_tensor)" in patched and "as_numpy()" not in patched.split("_eoscale_as_numpy")[0][-200:]
    compile(patched, "model.py", "exec")


def test_a_proxy_of_another_shape_is_refused():
    with pytest.raises(RuntimeError, match="not the one eoscale patches"):
        compat.patch_proxy("print('another proxy')\n")


def test_the_old_module_path_still_imports():
    from eoscale.serve import numpy2

    assert numpy2.patch_proxy is compat.patch_proxy
