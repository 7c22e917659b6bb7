"""`main`: run `eoscale fit | validate | test` (and `pretrain`, which is `fit`) with the launcher asked for.

`--launcher lightning` (the default): `EoscaleCLI` in this process, which starts (or is started as) every rank;
`--launcher ray`: Ray Train's workers, each running `EoscaleCLI` (`eoscale.train.launch.ray_launcher`). The
launcher's options are taken out of the arguments first (`eoscale.train.launch.options`).
"""

from __future__ import annotations

import sys

from eoscale.errors import InputError
from eoscale.train.callbacks.profiling import bare_flag
from eoscale.train.launch.cli import EoscaleCLI
from eoscale.train.launch.options import split_launcher_args


def main(args: list[str] | None = None) -> None:
    """Run `eoscale fit|validate|test` with `args` (default: `sys.argv[1:]`); callable from tests."""
    if args is not None and not args:
        raise InputError("give a subcommand: fit, validate or test")
    options, rest = split_launcher_args(bare_flag(list(sys.argv[1:] if args is None else args)))
    if options.launcher == "ray":  # Ray Train starts the ranks (eoscale.train.launch.ray_launcher)
        if rest[:1] != ["fit"]:
            raise InputError("--launcher ray runs 'eoscale fit' and 'eoscale pretrain' only")
        from eoscale.train.launch.ray_launcher import launch

        launch(options, rest)
        return
    EoscaleCLI(args=rest if args is not None else None)


if __name__ == "__main__":
    main()
