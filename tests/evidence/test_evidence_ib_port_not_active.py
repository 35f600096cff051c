"""An IB port whose state is not Active carries no traffic, even with its link up: `PORT_INIT` (no subnet
manager sweep has configured it) and `PORT_ARMED` (configured, not activated) as `ibv_devinfo` prints them,
`Initializing` / `Armed` as `ibstat` does (IBA PortState). Such output is never `healthy` (issue 40's
after-fix batch: an `ibv_devinfo` of a pod's port in `PORT_INIT` was called healthy); it names no fault label
either: a subnet manager or a configuration not done yet is not a link flap."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aiops.evidence import investigate

# evals/real/ibv-devinfo-port-init-hostdevice-pod-network-operator-unresolved-2025 (Mellanox/network-operator#1646)
DEVINFO_INIT = (
    "hca_id: mlx5_7\n"
    "    transport:    InfiniBand (0)\n"
    "    fw_ver:    28.39.3004\n"
    "    phys_port_cnt:    1\n"
    "    port: 1\n"
    "    state:    PORT_INIT (2)\n"
    "    max_mtu:    4096 (5)\n"
    "    active_mtu:    4096 (5)\n"
    "    sm_lid:    4\n"
    "    port_id:    65535\n"
    "    link_layer:    InfiniBand\n"
)
DEVINFO_ACTIVE = DEVINFO_INIT.replace("PORT_INIT (2)", "PORT_ACTIVE (4)").replace("65535", "12")
# Constructed (not a capture): ibstat's block for a port whose link is up and that no SM has activated
IBSTAT_INIT = (
    "CA 'mlx5_0'\n"
    "\tCA type: MT4129\n"
    "\tNumber of ports: 1\n"
    "\tPort 1:\n"
    "\t\tState: Initializing\n"
    "\t\tPhysical state: LinkUp\n"
    "\t\tRate: 400\n"
    "\t\tLink layer: InfiniBand\n"
)


def _run(tmp_path: Path, name: str, text: str) -> dict[str, Any]:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return investigate([path])


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("ibv-devinfo.txt", DEVINFO_INIT),
        ("ibv-devinfo.txt", DEVINFO_INIT.replace("PORT_INIT (2)", "PORT_ARMED (3)")),
        ("ibstat.txt", IBSTAT_INIT),
    ],
)
def test_a_port_not_active_is_a_finding_not_healthy(tmp_path: Path, name: str, text: str) -> None:
    result = _run(tmp_path, name, text)
    assert result["verdict"] == "inconclusive"
    assert [f["title"] for f in result["findings"]] == ["ib_port_state"]
    assert not any(h["confidence"] >= 0.6 for h in result["hypotheses"])


def test_an_active_port_stays_healthy(tmp_path: Path) -> None:
    assert _run(tmp_path, "ibv-devinfo.txt", DEVINFO_ACTIVE)["verdict"] == "healthy"
