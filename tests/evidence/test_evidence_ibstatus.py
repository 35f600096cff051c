"""`ibstatus` (infiniband-diags) read as its own format, its ports judged as ibstat's are: the real outputs of
evals/real (the probes unseen6 and unseen8, already scored; case.yaml names each source), and constructed port
blocks, marked so, laid out as the script prints them (rdma-core infiniband-diags/scripts/ibstatus: a tab,
the key, a tab or two, a space, the sysfs file's text)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiops.evidence import investigate
from aiops.evidence.detect import detect_format
from aiops.evidence.events import LogEvent

REAL = Path(__file__).resolve().parents[2] / "evals" / "real"
# two RoCE ports 4: ACTIVE / 5: LinkUp at 100 Gb/sec (NVIDIA/nccl#1866)
HEALTHY = REAL / "unseen8-2026-12-06" / "healthy-ibstatus-two-roce-ports-active-100g-gdr-thread-2025"
# five unused ports 1: DOWN / 3: Disabled (NVIDIA/nccl#1935)
DISABLED = REAL / "unseen6-2026-12-06" / "ibstatus-many-ports-down-disabled-nccl-cuda-999-unresolved-2025"
# `State: Down` / `Physical state: Polling` in ibstat's words (leptonai/gpud#482)
IBSTAT_POLLING = REAL / "ib-port-polling-rate10-gpud-2025" / "ibstat.txt"

# Constructed (not a capture): the facts of IBSTAT_POLLING's port (mlx5_10 port 1, Down, Polling, rate 10, lid
# 868 = 0x364, SM lid 334 = 0x14e) as ibstatus prints them; the GID is made up.
IBSTATUS_POLLING = (
    "Infiniband device 'mlx5_10' port 1 status:\n"
    "\tdefault gid:\t fe80:0000:0000:0000:0000:0000:0000:0001\n"
    "\tbase lid:\t 0x364\n"
    "\tsm lid:\t\t 0x14e\n"
    "\tstate:\t\t 1: DOWN\n"
    "\tphys state:\t 2: Polling\n"
    "\trate:\t\t 10 Gb/sec (4X SDR)\n"
    "\tlink_layer:\t InfiniBand\n"
    "\n"
)


def _run(*paths: Path) -> tuple[dict[str, Any], list[LogEvent]]:
    events: list[LogEvent] = []
    return investigate(list(paths), sink=events.append), events


def _states(events: list[LogEvent]) -> list[tuple[str | None, str, str]]:
    return [
        (e.component, e.detail["state"], e.detail["physical"]) for e in events if e.kind == "ib_port_state"
    ]


def _judged(result: dict[str, Any]) -> tuple[Any, ...]:
    """What a reader's events came to: the verdict, the hypotheses, the kinds of the findings."""
    hyps = [(h["root_cause"], h["component"], h["confidence"]) for h in result["hypotheses"]]
    return result["verdict"], hyps, sorted(f["title"] for f in result["findings"])


def test_ibstatus_is_its_own_format() -> None:
    for case in (HEALTHY, DISABLED):
        text = (case / "ibstatus.txt").read_text(encoding="utf-8").splitlines()
        assert detect_format(text) == "ibstatus"
    assert detect_format(IBSTATUS_POLLING.splitlines()) == "ibstatus"
    # ibstat's own output stays `ib`
    assert detect_format(IBSTAT_POLLING.read_text(encoding="utf-8").splitlines()) == "ib"


def test_two_active_linkup_roce_ports_are_healthy() -> None:
    result, events = _run(HEALTHY / "ibstatus.txt")
    source = result["sources"][0]
    assert (source["format"], source["lines"], source["unknown"]) == ("ibstatus", 17, 1)  # the blank line
    assert _states(events) == [("mlx5_0:1", "active", "linkup"), ("mlx5_1:1", "active", "linkup")]
    assert [(e.component, e.value) for e in events if e.kind == "ib_rate"] == [
        ("mlx5_0:1", 100.0),
        ("mlx5_1:1", 100.0),
    ]
    assert result["verdict"] == "healthy" and result["findings"] == []


def test_a_down_polling_port_is_judged_as_ibstat_judges_it(tmp_path: Path) -> None:
    path = tmp_path / "ibstatus.txt"
    path.write_text(IBSTATUS_POLLING, encoding="utf-8")
    ibstatus, events = _run(path)
    ibstat, ibstat_events = _run(IBSTAT_POLLING)
    assert ibstatus["sources"][0]["format"] == "ibstatus"
    assert _states(events) == _states(ibstat_events) == [("mlx5_10:1", "down", "polling")]
    assert _judged(ibstatus) == _judged(ibstat)
    assert _judged(ibstatus) == (
        "diagnosed",
        [("nic_link_flap", "this host/nic@mlx5_10:1", 0.7)],
        ["bad_reading", "ib_port_state"],
    )


def test_disabled_ports_are_findings_not_a_flap() -> None:
    result, events = _run(DISABLED / "ibstatus.txt")
    assert {physical for _, _, physical in _states(events)} == {"disabled"} and len(_states(events)) == 5
    assert result["verdict"] == "inconclusive" and result["hypotheses"] == []


def test_kernel_state_names_become_ibstat_names(tmp_path: Path) -> None:
    # Constructed: a port still INIT (no SM yet), and a port whose phys_state file could not be read.
    path = tmp_path / "ibstatus.txt"
    path.write_text(
        "Infiniband device 'mlx5_0' port 1 status:\n"
        "\tstate:\t\t 2: INIT\n"
        "\tphys state:\t 5: LinkUp\n"
        "\n"
        "Infiniband device 'mlx5_1' port 1 status:\n"
        "\tstate:\t\t 4: ACTIVE\n"
        "\tphys state:\t unknown\n",
        encoding="utf-8",
    )
    result, events = _run(path)
    assert _states(events) == [("mlx5_0:1", "initializing", "linkup")]
    # a port not Active carries no traffic, its link up or not (issue 40: tests/evidence/
    # test_evidence_ib_port_not_active.py): a finding, and no fault label
    assert [(f["title"], f["source"]) for f in result["findings"]] == [("ib_port_state", "ibstatus.txt:3")]
    assert result["verdict"] == "inconclusive" and result["hypotheses"] == []
