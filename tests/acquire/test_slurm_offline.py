"""The Slurm pipeline of acquisition on the local Slurm cluster: the login node (this process) searches and stages;
the compute steps (ingest, predict by items) run as chained Slurm jobs inside a network namespace of their own, with
no route to the servers, and still map."""

from __future__ import annotations

import subprocess
import time

import pytest
import requests
import zarr

from eoscale.cli import main
from eoscale.slurm.submit import wait
from tests.processes import VENV

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def _offline() -> str:
    """The command prefix that cuts a step off the network: a network namespace of its own (`unshare -rn`) with only
    its loopback up (Dask talks over it); where namespaces are not allowed, an unreachable proxy for every HTTP client."""
    if subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode == 0:
        return "unshare -rn sh -c 'ip link set lo up && exec \"$0\" \"$@\"'"
    return "env http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 no_proxy= NO_PROXY="


PROBE = """import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1], timeout=3)
except OSError as err:
    print(f"cut off: {err}")
    sys.exit(0)
sys.exit(f"{sys.argv[1]} answered: the network is not cut")
"""


def test_compute_steps_map_from_the_cache_with_the_network_cut(local_slurm, frozen, staged, scenes, assets, tmp_path,
                                                             capsys):
    """guards: a compute step that needs the network (an href fetched at ingest or predict): it fails here"""
    from tests.checkpoints import make_checkpoint

    checkpoint = make_checkpoint(tmp_path / "model.ckpt")
    (tmp_path / "probe.py").write_text(PROBE)
    first = next(scenes.glob("scenes/*/B04.tif"))
    offline = _offline()
    pipeline = tmp_path / "acquire.yaml"
    pipeline.write_text(f"""
name: acquire
profile: local
defaults: {{workdir: {str(tmp_path)!r}, venv: {str(VENV)!r}, time: "00:10:00"}}
steps:
  - name: cut
    command: >-
      {offline} python probe.py {assets.url}/{first.relative_to(scenes).as_posix()}
  - name: ingest
    command: >-
      {offline} eoscale ingest --items {frozen} --cache {staged} --tile-size 32 --workers 1 --quiet
      --min-valid 0.1 --output {tmp_path / 'tiles.zarr'}
  - name: predict
    command: >-
      {offline} eoscale predict --items {frozen} --cache {staged} --checkpoint {checkpoint} --device cpu
      --output {tmp_path / 'maps'}
""")
    assert requests.get(f"{assets.url}/{first.relative_to(scenes).as_posix()}", timeout=5).ok  # answers from here
    assets.clear()
    started = time.perf_counter()
    assert main(["slurm", "submit", str(pipeline)]) == 0
    jobs = dict(line.split("\t")[::-1] for line in capsys.readouterr().out.splitlines())
    states = wait(jobs.values(), timeout=600)
    print(f"acquire pipeline on Slurm: {time.perf_counter() - started:.1f} s")
    logs = {p.name: p.read_text()[-3000:] for p in (tmp_path / "logs").glob("*.out")}
    assert states == {job: "COMPLETED" for job in jobs.values()}, logs
    assert "cut off:" in next(text for name, text in logs.items() if "-cut-" in name)
    assert sum(assets.requests.values()) == 0  # the probe never reached the server either
    assert zarr.open_group(tmp_path / "tiles.zarr", mode="r")["images"].shape[0] > 0
    assert len(list((tmp_path / "maps").glob("*_landcover.tif"))) == 3
