"""What `eoscale predict` shows a person: a progress bar while it runs, a table of the scenes when it ends."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from eoscale.infer.outputs import writer_class


@contextmanager
def window_progress(windows: int, km2: float) -> Iterator[Callable[[int], None]]:
    """A rich progress bar over `windows` windows (covering `km2` km²); yields `advance(done_windows)`."""
    per_window = km2 / max(windows, 1)
    console = Console(file=sys.stderr)
    progress = Progress(
        TextColumn("predicting"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("windows  {task.fields[windows_s]:.1f} windows/s  {task.fields[km2_s]:.3f} km²/s"),
        TimeElapsedColumn(),
        console=console,
        disable=not console.is_terminal,
        transient=False,
    )
    started = time.perf_counter()
    with progress:
        task = progress.add_task("predict", total=windows, windows_s=0.0, km2_s=0.0)

        def advance(done: int) -> None:
            progress.advance(task, done)
            rate = progress.tasks[0].completed / max(time.perf_counter() - started, 1e-9)
            progress.update(task, windows_s=rate, km2_s=rate * per_window)

        yield advance


def print_summary(results: list, output: Path, *, console: Console | None = None, target: str = "classes") -> None:
    """Per scene: size, time, throughput and what the output writer of `target` says of its maps (a class model's:
    the three largest classes); then where the outputs are."""
    console = console or Console()
    writer = writer_class(target)
    table = Table(title="eoscale predict", show_lines=False)
    for column in ("scene", "size (px)", "km²", "time", "windows/s", "km²/s", writer.summary_column):
        table.add_column(column, justify="left" if column in ("scene", writer.summary_column) else "right")
    for r in results:
        top = writer.describe(r.areas)
        table.add_row(r.id, f"{r.height}×{r.width}", f"{r.km2:.2f}", f"{r.seconds:.1f} s",
                      f"{r.windows / max(r.seconds, 1e-9):.1f}", f"{r.km2 / max(r.seconds, 1e-9):.3f}", top)
    console.print(table)
    console.print(writer.files_note.format(output=output))
