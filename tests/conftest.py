"""Fixtures every test folder may use."""

from __future__ import annotations

import pytest


@pytest.fixture
def one_thread():
    """One torch thread for the test: runs compared value for value do the same reductions in the same order."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def kernel(tmp_path_factory) -> str:
    """JUPYTER_PATH with a kernelspec of this interpreter (`tests.notebooks.runner`)."""
    from tests.notebooks.runner import write_kernelspec

    return write_kernelspec(tmp_path_factory.mktemp("jupyter"))
