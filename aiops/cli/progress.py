"""A progress bar on stderr for simulated runs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn


@contextmanager
def sim_progress(label: str, enabled: bool = True) -> Iterator[Callable[[float, float], None]]:
    console = Console(stderr=True)
    if not enabled or not console.is_terminal:
        yield lambda done, total: None
        return
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:.0f}/{task.total:.0f} s"),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=1.0)

        def update(done_s: float, total_s: float) -> None:
            bar.update(task, completed=done_s, total=total_s)

        yield update
