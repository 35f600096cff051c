"""Stopping a long benchmark (bench/oncall.py): the first SIGTERM asks the run to stop at its next scrape and
print the figures of the hours it ran; the second exits at once. The false-alarm run honours the same request."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest

from bench.oncall import StopRequest
from bench.oncall_quiet import run_quiet


def test_the_first_sigterm_asks_the_run_to_stop_the_second_exits() -> None:
    stop = StopRequest()
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested  # Python ran the handler before os.kill returned to this frame
        with pytest.raises(SystemExit) as exited:
            os.kill(os.getpid(), signal.SIGTERM)
        assert exited.value.code == 143
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_stop_request_ends_the_false_alarm_run_at_its_first_scrape_with_its_figures(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    short = Path(tempfile.mkdtemp(prefix="q"))  # the run's workspace inside (a socket path must stay short)
    monkeypatch.setattr(tempfile, "tempdir", str(short))
    try:
        result = run_quiet(5.0, 7, 15.0, racks=1, stop=lambda: True)
    finally:
        shutil.rmtree(short)
    assert result["stopped_early"] is True
    assert result["simulated_days"] < 0.01, (
        result
    )  # stopped at its first scrape, not after the 0.6 days asked
