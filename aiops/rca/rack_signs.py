"""What a rack's own sensors say (the facts' `racks` rows: coolant flow and inlet against the reference): shared by
the GPU scorers (a hot GPU in a rack whose cooling failed is the rack's) and the facility scorers."""

from __future__ import annotations

from typing import Any


def flow_dropped(r: dict[str, Any]) -> bool:
    """The rack's coolant flow fell below 85 % of its reference."""
    return bool(
        r["ref_flow_lpm"] and r["min_flow_lpm"] is not None and r["min_flow_lpm"] < 0.85 * r["ref_flow_lpm"]
    )


def inlet_up(r: dict[str, Any]) -> bool:
    """The rack's inlet rose more than 3 °C over its reference."""
    return bool(
        r["ref_inlet_c"] is not None
        and r["max_inlet_c"] is not None
        and r["max_inlet_c"] > r["ref_inlet_c"] + 3
    )


def rack_abnormal(r: dict[str, Any]) -> bool:
    """Either of the two."""
    return flow_dropped(r) or inlet_up(r)


def rack_singled_out(racks: dict[str, dict[str, Any]], rack: str) -> bool:
    """The rack's own sensors moved in a way the weather does not explain: its coolant flow fell, or its inlet
    rose while another rack's did not."""
    r = racks.get(rack)
    if r is None:
        return False
    return flow_dropped(r) or (inlet_up(r) and any(not inlet_up(o) for o in racks.values()))
