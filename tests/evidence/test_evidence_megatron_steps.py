"""Megatron's iteration lines (`elapsed time per iteration (ms): X` of Megatron-LM's `training_log`, `(s): X` of
Megatron-DeepSpeed) are read as steps, their time in seconds: the real lines of BigScience's logbooks as the
probe evals/real/unseen3 holds them (already scored; each case.yaml names its source). They carry no
data-loading time, so they never make an input-pipeline hypothesis, and a clean training log stays an event
log (`inconclusive`, never `healthy`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aiops.evidence import investigate
from aiops.evidence.detect import detect_format
from aiops.evidence.events import LogEvent

PROBE = Path(__file__).resolve().parents[2] / "evals" / "real" / "unseen3-2026-12-06"
# tr11-176B-ml, torch.distributed.run's `[default7]:` prefix, the time in seconds (Megatron-DeepSpeed)
SECONDS = PROBE / "healthy-lm-loss-spike-grad-norm-default7-tr11-176b-2022" / "train.log"

# tr1-13B-base (bigscience-workshop/bigscience train/tr1-13B-base/chronicles.md), the time in milliseconds
MILLISECONDS = (
    "iteration    43680/  311541 | consumed samples:     25709904 | elapsed time per iteration (ms): 25593.4 |"
    " learning rate: 9.135E-05 | global batch size:  1024 | lm loss: 2.635663E+00 | loss scale: 131072.0 |"
    " grad norm: 17224.723 | num zeros: 0.0 | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
)


def _read(*paths: Path) -> tuple[dict[str, Any], list[LogEvent]]:
    events: list[LogEvent] = []
    return investigate(list(paths), sink=events.append), events


def _steps(events: list[LogEvent]) -> list[tuple[int, float, str | None]]:
    return [(e.line, e.value or 0.0, e.detail.get("iteration")) for e in events if e.kind == "train_step"]


def test_megatron_deepspeed_lines_in_seconds_are_steps() -> None:
    assert detect_format(SECONDS.read_text(encoding="utf-8").splitlines()) == "train-log"
    result, events = _read(SECONDS)
    source = result["sources"][0]
    assert (source["format"], source["parsed"], source["unknown"]) == ("train-log", 11, 1)  # `[...]` unknown
    steps = _steps(events)
    assert steps[0] == (1, 106.46, "31214") and steps[-1] == (12, 106.13, "31251")
    assert all("data_time_s" not in e.detail for e in events if e.kind == "train_step")
    assert result["verdict"] == "inconclusive" and result["hypotheses"] == []


def test_megatron_lm_lines_in_milliseconds_are_steps_in_seconds(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_text(MILLISECONDS, encoding="utf-8")
    result, events = _read(path)
    assert result["sources"][0]["format"] == "train-log"
    assert _steps(events) == [(1, pytest.approx(25.5934), "43680")]
    assert events[0].detail["step_time_s"] == "25.5934"
    # a step time alone says nothing of the input pipeline
    assert result["hypotheses"] == [] and result["verdict"] == "inconclusive"
