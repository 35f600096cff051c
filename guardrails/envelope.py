"""The power envelope, checked against the one record of a GPU's power (`aiops.models.GpuPower`).

`power_range_w` is the one envelope function: a GPU's limit may be set to [max(min_fraction x TDP, NVML
minimum), min(max_fraction x TDP, NVML maximum)] (`nvmlDeviceGetPowerManagementLimitConstraints`, nvml.h), and
one action moves it at most `max_step_w`. The guardrails' own envelope is 40-100 % of TDP and 150 W per step;
a response policy may only narrow it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from aiops.models import GpuPower

POWER_MIN_FRACTION_OF_TDP = 0.4
POWER_MAX_FRACTION_OF_TDP = 1.0
POWER_MAX_STEP_W = 150.0
TOLERANCE_W = 1e-6

__all__ = ["GUARDRAILS_ENVELOPE", "Envelope", "GpuPower", "power_range_w", "range_problem", "step_problem"]


class Envelope(BaseModel):
    """Per GPU: limit in [min, max] x TDP (and inside NVML's constraints), at most max_step_w per action."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_fraction_of_tdp: float = Field(
        default=POWER_MIN_FRACTION_OF_TDP, ge=POWER_MIN_FRACTION_OF_TDP, le=POWER_MAX_FRACTION_OF_TDP
    )
    max_fraction_of_tdp: float = Field(
        default=POWER_MAX_FRACTION_OF_TDP, ge=POWER_MIN_FRACTION_OF_TDP, le=POWER_MAX_FRACTION_OF_TDP
    )
    max_step_w: float = Field(default=POWER_MAX_STEP_W, ge=1, le=POWER_MAX_STEP_W)

    @model_validator(mode="after")
    def _ordered(self) -> Envelope:
        if self.min_fraction_of_tdp > self.max_fraction_of_tdp:
            raise ValueError(
                f"min_fraction_of_tdp {self.min_fraction_of_tdp:g} > max_fraction_of_tdp "
                f"{self.max_fraction_of_tdp:g}"
            )
        return self


GUARDRAILS_ENVELOPE = Envelope()


def power_range_w(gpu: GpuPower, envelope: Envelope = GUARDRAILS_ENVELOPE) -> tuple[float, float]:
    """[low, high] a GPU's limit may be set to under `envelope` (low > high: no room at all)."""
    low = max(envelope.min_fraction_of_tdp * gpu.tdp_w, gpu.min_w)
    high = min(envelope.max_fraction_of_tdp * gpu.tdp_w, gpu.max_w)
    return low, high


def _fmt(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.3g}"


def range_problem(gpu: GpuPower, watts: float, envelope: Envelope = GUARDRAILS_ENVELOPE) -> str | None:
    """Why `watts` is outside the GPU's range under `envelope`, naming the bound that stops it; None inside."""
    low, high = power_range_w(gpu, envelope)
    if watts < low - TOLERANCE_W:
        why = f"{envelope.min_fraction_of_tdp:.0%} of TDP {_fmt(gpu.tdp_w)} W".replace("%", " %")
        if low == gpu.min_w:
            why = f"NVML minimum of {gpu.gpu}"
        return f"power_limit_w {_fmt(watts)} < {_fmt(low)} ({why})"
    if watts > high + TOLERANCE_W:
        why = f"{envelope.max_fraction_of_tdp:.0%} of TDP {_fmt(gpu.tdp_w)} W".replace("%", " %")
        if high == gpu.max_w:
            why = f"NVML maximum of {gpu.gpu}"
        return f"power_limit_w {_fmt(watts)} > {_fmt(high)} ({why})"
    return None


def step_problem(gpu: GpuPower, watts: float, max_step_w: float) -> str | None:
    """Why moving the GPU's limit to `watts` is more than one step; None within it."""
    step = abs(watts - gpu.limit_w)
    if step > max_step_w + TOLERANCE_W:
        return (
            f"{gpu.gpu} {_fmt(gpu.limit_w)} W -> {_fmt(watts)} W is a {_fmt(step)} W step "
            f"(at most {_fmt(max_step_w)} W per action)"
        )
    return None
