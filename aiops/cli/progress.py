"""A progress bar on stderr for simulated runs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from aiops.text import markup, terminal


@contextmanager
def sim_progress(label: str, enabled: bool = True) -> Iterator[Callable[[float, float], None]]:
    console = terminal(stderr=True)
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
        task = bar.add_task(markup(label), total=1.0)

        def update(done_s: float, total_s: float) -> None:
            bar.update(task, completed=done_s, total=total_s)

        yield update
