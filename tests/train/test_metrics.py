"""The task's metrics against a confusion matrix counted by hand, on one process and synced over two."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from eoscale.classes import IGNORE_INDEX
from eoscale.errors import InputError
from eoscale.train.tasks.base import warmup_cosine
from eoscale.train.tasks.segmentation import SegmentationLoss, SegmentationTask, dice_loss

K = 3


def _data(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Predictions and labels (B, H, W) with every class present and some ignored pixels."""
    g = torch.Generator().manual_seed(seed)
    target = torch.randint(0, K, (2, 8, 8), generator=g)
    preds = torch.where(torch.rand(2, 8, 8, generator=g) < 0.6, target, torch.randint(0, K, (2, 8, 8), generator=g))
    target[:, 0, :3] = IGNORE_INDEX
    return preds, target


def _by_hand(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, float | list[float]]:
    cm = torch.zeros(K, K, dtype=torch.float64)
    for preds, target in pairs:
        for p, t in zip(preds.flatten().tolist(), target.flatten().tolist(), strict=True):
            if t != IGNORE_INDEX:
                cm[t, p] += 1
    tp = cm.diag()
    fp, fn = cm.sum(0) - tp, cm.sum(1) - tp
    iou = tp / (tp + fp + fn)
    return {"iou": iou.tolist(), "miou": iou.mean().item(), "accuracy": (tp.sum() / cm.sum()).item(),
            "f1": (2 * tp / (2 * tp + fp + fn)).mean().item(), "cm": cm}


def _metrics():
    task = SegmentationTask(num_classes=K, in_chans=4)
    return task.configure_metrics().clone(prefix="val_")


def _check(values: dict, expected: dict) -> None:
    torch.testing.assert_close(values["val_iou"].double(), torch.tensor(expected["iou"], dtype=torch.float64))
    for key in ("miou", "accuracy", "f1"):
        assert values[f"val_{key}"].item() == pytest.approx(expected[key], abs=1e-6), key


def test_metrics_match_a_confusion_matrix_by_hand():
    metrics = _metrics()
    pairs = [_data(0), _data(1)]
    for preds, target in pairs:
        metrics.update(preds, target)
    _check(metrics.compute(), _by_hand(pairs))


def _rank(rank: int, port: int, expected: dict, out) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        metrics = _metrics()
        metrics.update(*_data(rank))  # each rank sees only its own tiles
        _check(metrics.compute(), expected)  # compute() syncs the states over both ranks
        out.put((rank, "ok"))
    except Exception as err:  # reported to the parent, which fails the test
        out.put((rank, repr(err)))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_metrics_are_synced_over_two_ranks():
    expected = _by_hand([_data(0), _data(1)])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # spawned, not forked: a fork of a test process that runs threads (pytest-xdist's, torch's) can inherit a lock
    # that one of them held, and wait on it for ever (seen under scripts/test.sh)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, port, expected, out)) for r in (0, 1)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    assert results == {0: "ok", 1: "ok"}


def test_warmup_then_cosine():
    f = warmup_cosine(10, 110)
    assert f(0) == pytest.approx(0.1) and f(9) == pytest.approx(1.0)
    assert f(60) == pytest.approx(0.5) and f(110) == pytest.approx(0.0, abs=1e-9)
    assert warmup_cosine(0, 100, 0.1)(100) == pytest.approx(0.1)


def test_dice_ignores_ignored_pixels():
    target = torch.tensor([[[0, 1], [IGNORE_INDEX, 1]]])
    perfect = torch.nn.functional.one_hot(target.clamp(max=1), 2).permute(0, 3, 1, 2).float() * 50
    perfect[0, :, 1, 0] = torch.tensor([-50.0, 50.0])  # wrong where the label is ignored: no effect
    assert dice_loss(perfect, target).item() == pytest.approx(0.0, abs=1e-3)


def test_the_loss_is_cross_entropys_mean_and_0_on_a_batch_without_labels():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, K, 8, 8, generator=g, requires_grad=True)
    target = torch.randint(0, K, (2, 8, 8), generator=g)
    target[:, :5] = IGNORE_INDEX
    weights = torch.tensor([0.5, 1.0, 2.0])
    for w in (None, weights):
        want = torch.nn.functional.cross_entropy(logits, target, weight=w, ignore_index=IGNORE_INDEX)
        torch.testing.assert_close(SegmentationLoss(w)(logits, target), want)
    # sparse labels (a sample's points) leave some batches without a labelled pixel: 0 and no gradient, not NaN
    for w in (None, weights):
        loss = SegmentationLoss(w, dice_weight=1.0)(logits, torch.full_like(target, IGNORE_INDEX))
        loss.backward()
        assert loss.item() == 0.0 and logits.grad is not None and not logits.grad.any()
        logits.grad = None


def test_bad_loss_name():
    with pytest.raises(InputError, match="loss='focal'"):
        SegmentationTask(loss="focal")
