"""Exactly once across ranks and workers: 2 gloo processes × 2 DataLoader workers, as DDP runs them; also over
a training subset (`train_fraction`), and for a store of 3 dates a tile with date dropout and pick."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as tmp

WORLD, WORKERS, BATCH, FRACTION = 2, 2, 8, 0.25


def _per_rank(n: int) -> int:
    """Training tiles a rank gets: n // WORLD (at most WORLD - 1 dropped), one fewer where that would end the
    epoch in a batch of one tile (`eoscale.data.partition.rank_length`)."""
    length = n // WORLD
    return length - 1 if length % BATCH == 1 and length > BATCH else length


def _rank_main(rank: int, store: str, out: str, init: str, options: dict) -> None:
    from eoscale.data import TileDataModule

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=WORLD)
    try:
        dm = TileDataModule(store, batch_size=BATCH, num_workers=WORKERS, seed=7, **options)
        dm.setup("fit")  # rank and world size come from the process group
        result = {}
        loader = dm.train_dataloader()
        for name, epoch in [("epoch0", 0), ("epoch1", 1), ("epoch0_again", 0)]:
            loader.sampler.set_epoch(epoch)  # what Lightning calls
            result[name] = [batch["tile"].tolist() for batch in loader]
        result["len_train"] = len(loader)
        result["val"] = [batch["tile"].tolist() for batch in dm.val_dataloader()]
        result["len_val"] = len(dm.val_dataloader())
        subset = TileDataModule(store, batch_size=BATCH, num_workers=WORKERS, seed=7, train_fraction=FRACTION)
        subset.setup("fit")
        loader = subset.train_dataloader()
        result["subset"] = [t for batch in loader for t in batch["tile"].tolist()]
        result["len_subset"] = len(loader)
        result["subset_ranges"] = subset.tile_ranges("train").tolist()
        Path(out, f"rank{rank}.json").write_text(json.dumps(result))
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("which, options", [("store", {}), ("season", {"date_dropout": 0.3, "max_dates": 2})])
def test_two_ranks_two_workers_deliver_each_tile_once(request, tmp_path, which, options):
    store = request.getfixturevalue(which)  # one date a tile, or 3 (`tests.time_stores`) with date augmentation
    init = f"file://{tmp_path / 'rendezvous'}"
    # fork: the ranks inherit the imported modules (spawn took ~40 s here, mostly importing torch twice)
    tmp.start_processes(_rank_main, args=(store, str(tmp_path), init, options), nprocs=WORLD, join=True, start_method="fork")
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD)]
    from eoscale.data import read_store_attrs

    start, stop = read_store_attrs(store)["splits"]["train"]
    n = stop - start
    for name in ("epoch0", "epoch1"):
        tiles = [t for r in ranks for batch in r[name] for t in batch]
        assert len(tiles) == len(set(tiles)), "a tile was delivered twice"
        assert set(tiles) <= set(range(start, stop))
        # the documented bound: at most WORLD - 1 dropped, and a tile a rank more where it would end in a batch of one
        assert len(tiles) == WORLD * _per_rank(n)
        assert [len(r[name]) for r in ranks] == [r["len_train"] for r in ranks]  # len() is right
        assert len({len(r[name]) for r in ranks}) == 1  # equal steps on every rank
    # the tiles left out rotate (`partition.left_out`): two consecutive epochs train on every tile
    assert {t for r in ranks for name in ("epoch0", "epoch1") for batch in r[name] for t in batch} == set(range(start, stop))
    assert all(r["epoch0"] != r["epoch1"] for r in ranks)  # a new order each epoch
    assert all(r["epoch0"] == r["epoch0_again"] for r in ranks)  # the same for the same seed and epoch

    vstart, vstop = read_store_attrs(store)["splits"]["val"]
    counts = Counter(t for r in ranks for batch in r["val"] for t in batch)
    assert set(counts) == set(range(vstart, vstop))  # evaluation sees every tile
    assert sum(counts.values()) - (vstop - vstart) == (-(vstop - vstart)) % WORLD  # repeats at most WORLD - 1
    assert [len(r["val"]) for r in ranks] == [r["len_val"] for r in ranks]
    assert len({len(r["val"]) for r in ranks}) == 1

    # a training subset: the same on both ranks, each of its tiles at most once, fewer than WORLD dropped
    assert ranks[0]["subset_ranges"] == ranks[1]["subset_ranges"]
    subset = {t for a, b in ranks[0]["subset_ranges"] for t in range(a, b)}
    assert len(subset) == round(FRACTION * n)
    tiles = [t for r in ranks for t in r["subset"]]
    assert len(tiles) == len(set(tiles)) and set(tiles) <= subset
    assert len(tiles) == WORLD * _per_rank(len(subset))
    assert ranks[0]["len_subset"] == ranks[1]["len_subset"] == -(-_per_rank(len(subset)) // BATCH)
