"""`[dcim]` (the facility's power and cooling signals, their policy and actuator) and `[facility]` (rack inlet,
coolant and power read from the facility's own exporters in Prometheus, and a DCIM endpoint): sections of the
config (aiops/config.py re-exports them; docs/FACILITY.md)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

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


def _series(metric: str, aggregate: str = "avg", scale: float = 1.0, **match: str) -> Any:
    return Field(
        default_factory=lambda: FacilitySeries(metric=metric, match=match, aggregate=aggregate, scale=scale)
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
    # prometheus-community/ipmi_exporter (docs/metrics.md): every BMC's inlet sensor, averaged per rack
    inlet_temp_c: FacilitySeries = _series("ipmi_temperature_celsius", "avg", name="Inlet Temp")
    # HPE CPQRACK-MIB rack thermal controller through snmp_exporter: water return and supply, INTEGER in C
    outlet_temp_c: FacilitySeries = _series("cpqRackThermalControllerWaterTempReturn", "max")
    coolant_supply_temp_c: FacilitySeries = _series("cpqRackThermalControllerWaterTempSupply", "max")
    # DMTF Redfish CoolantConnector FlowLitersPerMinute of the rack's CDU loop, through json_exporter
    coolant_flow_lpm: FacilitySeries = _series("redfish_cdu_coolant_flow_liters_per_minute", "sum")
    # ipmi_exporter's DCMI power reading of every node in the rack, summed, W -> kW
    power_kw: FacilitySeries = _series("ipmi_dcmi_power_consumption_watts", "sum", 0.001)
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
