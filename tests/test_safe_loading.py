"""A crafted checkpoint never runs code, wherever eoscale reads one (issue 13, fault 3).

The file's payload would create a marker file when unpickled; every reader must refuse it (weights_only) and
the marker must never appear. Sharded DCP folders' `.distcp` files are pickles by torch's design: trusted input.
"""

from __future__ import annotations

import pathlib

import pytest
import torch

from eoscale.cli import main
from eoscale.errors import InputError


class Payload:
    def __init__(self, marker: pathlib.Path):
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (self.marker,))


@pytest.fixture
def crafted(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "crafted.ckpt"
    torch.save({"state_dict": {}, "eoscale": Payload(marker), "eoscale_mlflow_run_id": "x"}, path)
    assert not marker.exists()
    return path, marker


def test_fit_resume_reads_the_run_id_without_running_code(crafted):
    from eoscale.train.callbacks.monitor import resume_run_id

    path, marker = crafted
    assert resume_run_id(path) is None and not marker.exists()


def test_checkpoint_readers_refuse_it(crafted):
    from eoscale.contract import load_checkpoint
    from eoscale.models.checkpoint import load_finetune_weights, load_network

    path, marker = crafted
    for read in (lambda: load_checkpoint(path), lambda: load_network(path),
                 lambda: load_finetune_weights(torch.nn.Linear(1, 1), path, None)):
        with pytest.raises(InputError, match="cannot read checkpoint"):
            read()
    assert not marker.exists()


def test_consolidate_refuses_crafted_metadata(crafted, tmp_path):
    from eoscale.train.strategies.consolidate import consolidate

    path, marker = crafted
    folder = tmp_path / "sharded"
    folder.mkdir()
    (folder / "meta.pt").write_bytes(path.read_bytes())
    (folder / "__0_0.distcp").write_bytes(b"")
    with pytest.raises(InputError, match="cannot read checkpoint"):
        consolidate(folder, tmp_path / "out.ckpt")
    assert not marker.exists() and not (tmp_path / "out.ckpt").exists()


@pytest.mark.parametrize("command", [
    ["predict", "--checkpoint", "{ckpt}", "--input", "{ckpt}", "--output", "{out}"],
    ["adapter", "merge", "--checkpoint", "{ckpt}", "--adapter", "a", "--output", "{out}/m.ckpt"],
])
def test_commands_refuse_it_in_one_line(crafted, tmp_path, capsys, command):
    path, marker = crafted
    argv = [a.format(ckpt=path, out=tmp_path / "out") for a in command]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot read checkpoint" in err[0], err
    assert not marker.exists()
