"""PyTriton 0.7.0 under numpy 2: the fix, in the proxy model that PyTriton installs into Triton (PyTriton's
private proxy source and `Model.get_proxy_model_files`, checked on `CHECKED`).

The cause. PyTriton serves a Python callable through Triton's Python backend: Triton runs the model's
`model.py` (PyTriton's proxy, `pytriton/proxy/model.py`) in the backend's stub process
(`triton_python_backend_stub`, a binary bundled in the wheel), and the proxy turns each request's tensors into
numpy arrays with `Tensor.as_numpy()` and the answers back with `Tensor(name, array)`. Both are C++ (pybind11)
in the stub, and the stub was built with a pybind11 older than 2.12 (its strings import `numpy.core.multiarray`,
which numpy 2 renamed `numpy._core`): that pybind11 reads numpy's C structures with numpy 1's layout. numpy 2
changed `PyArray_Descr` (`elsize` moved behind a 64-bit `flags` field and became `npy_intp`), so the stub reads
an array's item size from the wrong bytes and builds arrays whose shape and strides do not fit their data: the
"shape error at inference" (`NumPy: shape ndim doesn't match strides ndim` and the like). Pinning numpy < 2
hides it; the stub itself cannot be rebuilt here.

Measured here (numpy 2.4, a uint16 [2, 3, 4] input and float32 output): the request reached the callable intact
(`as_numpy` of a uint16 tensor happened to survive) but the answer came back empty, "cannot reshape array of size
0 into shape (2,3,4)": `Tensor(name, array)` computed the output's byte size from an item size of 0.

The fix. The stub also speaks DLPack (`Tensor.to_dlpack()`, `Tensor.from_dlpack()`), which hands over a plain C
struct (`DLTensor`: pointer, dtype code and bits, shape, strides) and no numpy internals; numpy 2 reads and
writes DLPack itself (`numpy.from_dlpack`, `ndarray.__dlpack__`). So the two conversions of the proxy are
swapped for DLPack ones (`REPLACEMENTS`, `HELPERS`), in the proxy file PyTriton sends to Triton when it loads a
model (`Model.get_proxy_model_files`), for the models eoscale binds only. The patch names the exact lines it
replaces and refuses a PyTriton whose proxy differs, so a new PyTriton cannot silently run unpatched.

A second trap of the same stub, not about numpy: it links `libpython3.X.so` by name, so it takes the system's
(Debian's 3.11.2 here) even when the serving interpreter is another build of 3.11 (pyenv's 3.11.7), and then runs
that interpreter's standard library on the older runtime (`'_thread.RLock' object has no attribute
'_recursion_count'` when PyTriton's proxy starts its shared-memory manager). `stub_library_path` puts the serving
interpreter's own library first on the stub's `LD_LIBRARY_PATH`.
"""

from __future__ import annotations

from typing import Any

from eoscale._compat import Checked

CHECKED = Checked("nvidia-pytriton", "0.7.0", "0.8",
                  "PyTriton's proxy model.py and Model.get_proxy_model_files (the DLPack patch)")
PROXY_FILE = "model.py"
# (what PyTriton 0.7.0's proxy says, what it says here): the request's inputs and the response's outputs
REPLACEMENTS = (
    ("request[input_name] = input_tensor.as_numpy()", "request[input_name] = _eoscale_as_numpy(input_tensor)"),
    ("pb_utils.Tensor(name, value)", "_eoscale_to_tensor(name, value)"),
)
ANCHOR = "from .telemetry import TracableModel  # pytype: disable=import-error\n"
HELPERS = '''
# eoscale (eoscale/_compat/pytriton.py): tensors cross the stub by DLPack, not by its numpy-1-only pybind11 bindings
import numpy as _eoscale_np  # noqa: E402


class _EoscaleDLPack:
    """A stub tensor as a DLPack producer numpy 2 accepts (the stub's own `__dlpack__` takes no keywords)."""

    def __init__(self, tensor):
        self._tensor = tensor

    def __dlpack__(self, *args, **kwargs):
        return self._tensor.to_dlpack()

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU: Triton hands the Python backend's CPU tensors over in shared memory


def _eoscale_as_numpy(tensor):
    return _eoscale_np.from_dlpack(_EoscaleDLPack(tensor))


import ctypes as _eoscale_ctypes  # noqa: E402

_EOSCALE_USED = b"used_dltensor"  # module-level: the name must outlive the capsule
_eoscale_set_name = _eoscale_ctypes.pythonapi.PyCapsule_SetName
_eoscale_set_name.argtypes = [_eoscale_ctypes.py_object, _eoscale_ctypes.c_char_p]


def _eoscale_to_tensor(name, value):
    # a capsule, not the array: the stub's from_dlpack(array) asks numpy 2 for a versioned capsule it cannot read
    capsule = _eoscale_np.ascontiguousarray(value).__dlpack__()
    tensor = pb_utils.Tensor.from_dlpack(name, capsule)
    # the stub marks the capsule it consumed 'used_dlpack'; numpy's destructor only knows DLPack's 'used_dltensor'
    # and would otherwise report an error (harmless but noisy) for every answer
    _eoscale_set_name(capsule, _EOSCALE_USED)
    return tensor
'''


def patch_proxy(source: str) -> str:
    """PyTriton's proxy `model.py` with its numpy conversions done by DLPack; a proxy of another shape is refused."""
    if ANCHOR not in source:
        raise RuntimeError("PyTriton's proxy model.py is not the one eoscale patches (see eoscale/_compat/pytriton.py)")
    for old, new in REPLACEMENTS:
        if source.count(old) != 1:
            raise RuntimeError(f"PyTriton's proxy model.py does not say {old!r} once: eoscale/serve/numpy2.py "
                               "needs updating for this PyTriton")
        source = source.replace(old, new)
    return source.replace(ANCHOR, ANCHOR + HELPERS, 1)


def use_dlpack_proxy(model: Any) -> None:
    """Make a bound PyTriton `Model` send Triton the patched proxy when it is loaded (PyTriton loads models with
    their files, `ModelManager._load_model`, unless the model store is local, which eoscale never asks for).
    Outside `CHECKED` this refuses in one line (an unpatched proxy would answer with empty arrays)."""
    CHECKED.require()
    files = model.get_proxy_model_files

    def patched() -> dict[str, bytes]:
        out = dict(files())
        key = f"file:{model.model_version}/{PROXY_FILE}"
        out[key] = patch_proxy(out[key].decode()).encode()
        return out

    model.get_proxy_model_files = patched


def stub_library_path(environ: dict[str, str]) -> None:
    """Put the folder of this interpreter's `libpython` first on `LD_LIBRARY_PATH` in `environ` (tritonserver
    passes its environment on to the backend stub), when this interpreter has a shared library there."""
    import sysconfig
    from pathlib import Path

    folder, library = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("INSTSONAME")
    if not folder or not library or not (Path(folder) / library).is_file():
        return
    paths = [p for p in environ.get("LD_LIBRARY_PATH", "").split(":") if p and p != folder]
    environ["LD_LIBRARY_PATH"] = ":".join([folder, *paths])
