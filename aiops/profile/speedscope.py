"""speedscope JSON (https://www.speedscope.app/file-format-schema.json): one sampled profile per view."""

from __future__ import annotations

from collections import Counter
from typing import Any

from aiops.profile.folded import VIEWS, clean_frame

SPEEDSCOPE_SCHEMA = "https://www.speedscope.app/file-format-schema.json"
UNITS = {"calls": "none", "us": "microseconds", "samples": "none"}


def speedscope_document(views: dict[str, Counter[tuple[str, ...]]], name: str) -> dict[str, Any]:
    frame_index: dict[str, int] = {}
    profiles: list[dict[str, Any]] = []
    for view, weights in views.items():
        samples: list[list[int]] = []
        sample_weights: list[int] = []
        for frames, weight in sorted(weights.items(), key=lambda item: (-item[1], item[0])):
            samples.append([frame_index.setdefault(clean_frame(frame), len(frame_index)) for frame in frames])
            sample_weights.append(weight)
        total = sum(sample_weights)
        profiles.append(
            {
                "type": "sampled",
                "name": f"{view} ({VIEWS[view]})",
                "unit": UNITS[VIEWS[view]],
                "startValue": 0,
                "endValue": total,
                "samples": samples,
                "weights": sample_weights,
            }
        )
    return {
        "$schema": SPEEDSCOPE_SCHEMA,
        "name": name,
        "exporter": "aiops profile",
        "activeProfileIndex": 0,
        "shared": {"frames": [{"name": frame} for frame in frame_index]},
        "profiles": profiles,
    }
