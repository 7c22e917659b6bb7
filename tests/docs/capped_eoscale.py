"""`eoscale` as the documentation's commands run in tests/docs/test_documented_commands.py: the same command line,
with caps appended so that a documented workflow runs in seconds: synthetic scenes of at most SIZE px a side, and
STEPS training steps (one validation, no loader worker processes). Nothing else of a command changes.

    python tests/docs/capped_eoscale.py synth runs/chm --heights      # = eoscale synth runs/chm --heights --size 256
"""

from __future__ import annotations

import sys

SIZE = 256  # px a side: 16 tiles of 64 px a scene, enough for a train/val/test split per scene block
STEPS = 2
TRAINING = ("fit", "pretrain", "validate", "test")


def capped(argv: list[str]) -> list[str]:
    """`argv` (after `eoscale`) with the caps for its command."""
    command = argv[0] if argv else ""
    if command == "synth":
        return _synth_size(argv)
    if command in TRAINING:
        return argv + ["--trainer.max_steps", str(STEPS), "--trainer.val_check_interval", str(STEPS),
                       "--trainer.limit_val_batches", "1", "--trainer.limit_test_batches", "1",
                       "--data.init_args.num_workers", "0"]
    return argv


def _synth_size(argv: list[str]) -> list[str]:
    argv = list(argv)
    if "--size" not in argv:
        return argv + ["--size", str(SIZE)]
    i = argv.index("--size") + 1
    sides = [min(int(side), SIZE) for side in argv[i].lower().split("x")]
    argv[i] = "x".join(str(side) for side in sides)
    return argv


if __name__ == "__main__":
    from eoscale.cli import main

    sys.exit(main(capped(sys.argv[1:])))
