"""Running a notebook of notebooks/ in a test: a kernel of this interpreter, its outputs checked."""

from __future__ import annotations

import json
import sys
from pathlib import Path

KERNEL = "eoscale-tests"


def write_kernelspec(folder: Path) -> str:
    """A kernelspec that runs this interpreter, in `folder` (to be found through JUPYTER_PATH): a fresh CI
    machine needs nothing registered."""
    spec = folder / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "eoscale tests", "language": "python",
    }))
    return str(folder)


def run_notebook(path: Path, env: dict[str, str], kernel_dir: str, cwd: Path, monkeypatch) -> list:
    """Execute a notebook in a kernel of this interpreter with `env` set; its code cells' outputs, after
    checking that none is an error and that it drew at least two figures."""
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("JUPYTER_PATH", kernel_dir)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, kernel_name=KERNEL, timeout=300,
                            resources={"metadata": {"path": str(cwd)}})  # the kernel's working directory
    client.execute()
    outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 2, f"{path.name} drew {len(images)} figures"
    return outputs
