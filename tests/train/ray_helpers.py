"""Callbacks the Ray launcher tests add on the command line (a worker that SIGKILLs itself once, a log of the
tiles each rank trained on) and what those tests read back."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from lightning import Callback


class KillOnce(Callback):
    """Rank `rank` SIGKILLs its own process when it is about to take step `step`, the first time only (a marker
    file in `folder` remembers it): a worker lost mid-run, as a node failure or the OOM killer would do it."""

    def __init__(self, folder: str, step: int, rank: int = 1) -> None:
        self.marker = Path(folder) / "killed"
        self.step, self.rank = step, rank

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_rank == self.rank and trainer.global_step == self.step and not self.marker.exists():
            self.marker.parent.mkdir(parents=True, exist_ok=True)
            self.marker.write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)


class TileLog(Callback):
    """`<folder>/tiles<rank>.json`: {epoch: [tile ids of this rank's training batches]}, written at each epoch's end
    and at the end of fit."""

    def __init__(self, folder: str) -> None:
        self.folder = Path(folder)
        self.epochs: dict[int, list[int]] = {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.epochs.setdefault(trainer.current_epoch, []).extend(int(t) for t in batch["tile"].tolist())

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self._write(trainer)

    def on_fit_end(self, trainer, pl_module) -> None:
        self._write(trainer)

    def _write(self, trainer) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / f"tiles{trainer.global_rank}.json").write_text(json.dumps(self.epochs))


def per_rank(store: Path, world: int, batch: int) -> tuple[int, int, int]:
    """(first, end) of the store's training tiles and the tiles a rank gets an epoch (eoscale.data.partition)."""
    from eoscale.data import read_store_attrs

    start, stop = read_store_attrs(store)["splits"]["train"]
    tiles = (stop - start) // world
    return start, stop, tiles - (1 if tiles % batch == 1 and tiles > batch else 0)


def rank_reports(folder: Path, world: int) -> dict:
    """What `tests.train.helpers.RankReport` wrote in `folder`: {"<r>": at the end, "start<r>": at the start}."""
    import torch

    return {f"{tag}{r}": torch.load(folder / f"{tag}rank{r}.pt", weights_only=True) for r in range(world)
            for tag in ("", "start")}
