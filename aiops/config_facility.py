"""`[dcim]` (the facility's power and cooling signals, their policy and actuator) and `[facility]` (rack inlet,
coolant and power read from the facility's own exporters in Prometheus, and a DCIM endpoint): sections of the
config (aiops/config.py re-exports them; docs/FACILITY.md)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from aiops.columns_rack import RACK_SAMPLES
from aiops.labels import rack_name_error


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DcimConfig(_Section):
    enabled: bool = False
    policy: str = Field(default="", description="response policy file; empty: the shipped one")
    signals_file: str = Field(default="", description="JSON/YAML signals file a facility exporter writes")
    interval_s: float = Field(default=5.0, gt=0, le=3600)
    actuator: Literal["auto", "nvml", "none", "twin"] = "auto"


_METRIC = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$", re.ASCII)
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$", re.ASCII)


def _label_name(value: str) -> str:
    if not _LABEL.match(value) or value.startswith("__"):
        raise ValueError("must be a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*, not __reserved)")
    return value


class FacilitySeries(_Section):
    """One rack_samples column read from one exporter series: `metric{match...}`, its series combined per rack
    by `aggregate`, times `scale` (to the column's unit: W -> kW is 0.001)."""

    metric: str = Field(description="the exporter's metric name")
    match: dict[str, str] = Field(
        default_factory=dict, description="label = exact value the series must have"
    )
    aggregate: Literal["avg", "sum", "max", "min"] = Field(
        default="avg", description="how a rack's series combine (its BMCs' inlets: avg; their power: sum)"
    )
    scale: float = Field(default=1.0, gt=0, le=1e6, description="the value times this is the column's unit")

    @field_validator("metric")
    @classmethod
    def _metric(cls, value: str) -> str:
        if not _METRIC.match(value):
            raise ValueError("must be a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)")
        return value

    @field_validator("match")
    @classmethod
    def _match(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            _label_name(name)
        return value


def _series(column: str) -> Any:
    """The column's default series, declared with it (aiops/columns_rack.py)."""
    named = RACK_SAMPLES.column(column).facility
    assert named is not None, column
    return Field(
        default_factory=lambda: FacilitySeries(
            metric=named.metric, match=dict(named.match), aggregate=named.aggregate, scale=named.scale
        )
    )


class FacilityConfig(_Section):
    """Rack sensors no node agent has, read from the facility's exporters through Prometheus (docs/FACILITY.md):
    which series feed which rack_samples column, which rack a series belongs to, and the DCIM input."""

    rack_label: str = Field(
        default="rack", description="the label naming a series' rack (its configured name)"
    )
    instance_label: str = Field(default="instance", description="the label `racks` maps to a rack")
    racks: dict[str, str] = Field(
        default_factory=dict,
        description="instance -> rack name, for series without the rack label (e.g. a BMC's address)",
    )
    # one field per rack_samples sensor column, its default series declared with it (aiops/columns_rack.py):
    # ipmi_exporter's inlet sensors and DCMI power, an HPE rack controller's water temperatures through
    # snmp_exporter, a CDU's Redfish coolant flow through json_exporter
    inlet_temp_c: FacilitySeries = _series("inlet_temp_c")
    outlet_temp_c: FacilitySeries = _series("outlet_temp_c")
    coolant_supply_temp_c: FacilitySeries = _series("coolant_supply_temp_c")
    coolant_flow_lpm: FacilitySeries = _series("coolant_flow_lpm")
    power_kw: FacilitySeries = _series("power_kw")
    dcim: str = Field(
        default="",
        description="the DCIM caps document: a file path or an http(s):// URL; empty: none",
    )
    dcim_timeout_s: float = Field(default=5.0, gt=0, le=120, description="one DCIM read, whole answer")

    @field_validator("rack_label", "instance_label")
    @classmethod
    def _label(cls, value: str) -> str:
        return _label_name(value)

    @field_validator("racks")
    @classmethod
    def _racks(cls, value: dict[str, str]) -> dict[str, str]:
        for instance, rack in value.items():
            error = rack_name_error(rack)
            if error:
                raise ValueError(
                    f"'{instance[:60]}' -> '{rack[:20]}': a rack name {error.removeprefix('must be ')}"
                )
        return value

    @model_validator(mode="after")
    def _distinct(self) -> FacilityConfig:
        seen: dict[tuple[str, tuple[tuple[str, str], ...]], str] = {}
        for name, field in type(self).model_fields.items():
            series = getattr(self, name)
            if field.annotation is FacilitySeries:
                key = (series.metric, tuple(sorted(series.match.items())))
                if key in seen:
                    raise ValueError(f"{name} reads the same series as {seen[key]}: add a match label to one")
                seen[key] = name
        return self

    @field_validator("dcim")
    @classmethod
    def _dcim(cls, value: str) -> str:
        if "://" in value and not re.match(r"^https?://[^\s]+$", value):
            raise ValueError("must be a file path or an http:// or https:// URL")
        return value
