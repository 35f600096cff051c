"""rack_samples' columns, each declared once (aiops/columns.py says what derives from a declaration; the recipe for
a new one: docs/ARCHITECTURE.md, "Add a telemetry column"). One row per rack and step: what the rack's CDU, PDU
and BMCs measure, and the DCIM cap in force. No node agent exports them (no `Family`): the facility's own
exporters do, and each sensor column declares the series `[facility]` reads it from by default
(aiops/config_facility.py, aiops/sources/facility.py, docs/FACILITY.md); the twin serves the same series at
/metrics/facility."""

from __future__ import annotations

from aiops.column_model import ANY, HEAT, Column, FacilityName, Table

COOLING = frozenset({"rack_cooling_failure"})
RACK_CONTROLLER = "1.3.6.1.4.1.232.22.2.9.1.1.1"  # HPE CPQRACK-MIB cpqRackThermalControllerEntry

RACK_SAMPLES = Table(
    "rack_samples",
    (
        Column("ts_s", "float64", key=True),
        Column("rack", "string", key=True),
        Column(
            "inlet_temp_c",
            "float64",
            reacts_to=HEAT,
            observed_by="the CDU's supply-side sensor",
            # prometheus-community/ipmi_exporter: every BMC's inlet sensor, averaged per rack
            facility=FacilityName(
                "ipmi_temperature_celsius",
                "avg",
                "Current temperature reading of sensor.",
                match=(("name", "Inlet Temp"),),
            ),
        ),
        Column(
            "outlet_temp_c",
            "float64",
            reacts_to=ANY,
            observed_by="the CDU's return temperature (inlet + the rack's heat)",
            # HPE CPQRACK-MIB rack thermal controller through snmp_exporter: water return, INTEGER in C
            facility=FacilityName(
                "cpqRackThermalControllerWaterTempReturn",
                "max",
                f"Water temperature return in C - {RACK_CONTROLLER}.22",
            ),
        ),
        Column(
            "coolant_supply_temp_c",
            "float64",
            reacts_to=HEAT,
            observed_by="the CDU's supply temperature",
            facility=FacilityName(
                "cpqRackThermalControllerWaterTempSupply",
                "max",
                f"Water temperature supply in C - {RACK_CONTROLLER}.21",
            ),
        ),
        Column(
            "coolant_flow_lpm",
            "float64",
            reacts_to=COOLING,
            observed_by="the CDU's flow meter",
            # DMTF Redfish CoolantConnector FlowLitersPerMinute of the rack's CDU loop, through json_exporter
            facility=FacilityName(
                "redfish_cdu_coolant_flow_liters_per_minute",
                "sum",
                "CoolantConnector FlowLitersPerMinute of the CDU loop.",
            ),
        ),
        Column(
            "power_kw",
            "float64",
            reacts_to=ANY,
            observed_by="the rack PDU's power meter",
            # ipmi_exporter's DCMI power reading of every node in the rack, summed, W -> kW
            facility=FacilityName(
                "ipmi_dcmi_power_consumption_watts", "sum", "Current power consumption in Watts.", scale=0.001
            ),
        ),
        Column("power_cap_kw", "float64"),  # the DCIM cap in force (its word, not a sensor's), NULL for none
    ),
)
