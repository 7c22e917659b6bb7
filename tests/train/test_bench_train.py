"""`eoscale bench train`'s plain-PyTorch references: the DDP loop really runs 2 gloo ranks in step, and the
median of repeats is picked as documented (no timing asserted)."""

from __future__ import annotations

from eoscale.bench.train import WARMUP_STEPS, median_run, plain_ddp, plain_loop


def test_plain_ddp_runs_two_ranks_and_counts_both(store, tmp_path):
    steps, batch = WARMUP_STEPS + 2, 2
    figures = plain_ddp(str(store), tmp_path, steps=steps, batch=batch, backbone="resnet18")
    assert figures["world_size"] == 2
    assert figures["steps_timed"] == 2
    # samples/s counts both ranks' samples
    assert abs(figures["samples_per_s"] - 2 * batch * 2 / figures["seconds"]) < 1e-6


def test_plain_loop_counts_one_process(store):
    figures = plain_loop(str(store), steps=WARMUP_STEPS + 1, batch=2, backbone="resnet18")
    assert figures["world_size"] == 1 and figures["steps_timed"] == 1


def test_median_run_takes_the_middle_of_the_repeats():
    runs = [{"samples_per_s": v} for v in (5.0, 1.0, 3.0)]
    assert median_run(runs)["samples_per_s"] == 3.0
    assert median_run(runs[:2])["samples_per_s"] == 1.0  # even count: the lower middle
