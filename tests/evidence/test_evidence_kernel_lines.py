"""One kernel-line parser (collectors/kmsg_parse.py) for both of its callers: the /dev/kmsg collector
(`classify`) and `aiops investigate`'s kernel-log parser (aiops/evidence/kernel.py) (issue: evidence, item 1).

- Every kernel-log line of the real corpus gives the events the investigate parser gave before it called the
  shared parser (evidence_fixtures/kernel_events_corpus.json, written by the old parser).
- On every corpus and kmsg-fixture line, the two callers read the shared shapes alike: an Xid, an AER header,
  a link change is the same code on the same device through both.
- The lines whose investigate reading changed when it moved to the shared parser (all kmsg fixtures, none in
  the corpus): the table below."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aiops.evidence import investigate, kernel
from aiops.evidence.detect import detect_format
from aiops.evidence.events import LogEvent
from aiops.evidence.reader import lines
from collectors import kmsg_parse
from tests.test_collectors_kmsg import LINES as KMSG_LINES

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "evals" / "real"
BEFORE = Path(__file__).resolve().parent / "evidence_fixtures" / "kernel_events_corpus.json"


def _kernel_files() -> list[Path]:
    found = []
    for path in sorted(REAL.rglob("*")):
        if not path.is_file() or path.name in ("case.yaml", "README.md"):
            continue
        if detect_format(text for _n, text in lines(path)) == "kernel-log":
            found.append(path)
    return found


def _events(path: Path) -> list[tuple[str, LogEvent | None]]:
    numbered = list(lines(path))
    return [
        (raw, event) for (_n, raw), event in zip(numbered, kernel.parse(path.name, numbered), strict=True)
    ]


def _one(line: str) -> LogEvent | None:
    return next(kernel.parse("f", [(1, line)]))


def test_corpus_kernel_events_are_those_of_the_parser_before() -> None:
    """The 38 cases of the corpus when the parser moved (cases added later are checked by the tests below)."""
    before = json.loads(BEFORE.read_text(encoding="utf-8"))
    files = {entry["file"] for entry in before}
    now = [
        {
            "file": str(path.relative_to(REAL)),
            "line": event.line,
            "kind": event.kind,
            "component": event.component,
            "code": event.code,
            "detail": event.detail,
        }
        for path in _kernel_files()
        if str(path.relative_to(REAL)) in files
        for _raw, event in _events(path)
        if event is not None
    ]
    assert len(before) > 80
    assert now == before


def _agree(message: str, event: LogEvent | None, state: kmsg_parse.LineState | None = None) -> None:
    """The collector's reading of a line and investigate's are the same fact (state: the log's lines before)."""
    shared = kmsg_parse.classify(message, state)
    if shared is None:
        assert event is None or event.kind not in ("aer", "nic_link")
        assert event is None or event.kind != "xid" or event.component is None  # a redacted bus id only
        return
    assert event is not None
    if shared.kind == "aer":
        severity = {kmsg_parse.AER_CORRECTABLE: 0, kmsg_parse.AER_NONFATAL: 1, kmsg_parse.AER_FATAL: 2}
        assert event.kind in ("aer", "aer_detail")
        if event.kind == "aer":
            assert (event.code, event.component) == (severity[shared.code or 0], shared.pci_bus_id)
    elif shared.kind == "link":
        assert (event.kind, event.code, event.component) == ("nic_link", shared.code, shared.device)
    elif shared.kind == "thermal":
        assert (event.kind, event.code) == ("cpu_thermal", shared.code)
    else:  # xid, mce, fell_off_bus, gpu_id, aer_surprise_down, aer_detail, gsp_*, init_failed, nvrm_error
        assert (event.kind, event.code) == (shared.kind, shared.code)
        if shared.pci_bus_id is not None or shared.device is not None:  # a bus id, or a GSP line's GPU<n>
            assert event.component == (shared.pci_bus_id or shared.device)


def test_both_callers_read_every_corpus_kernel_line_alike() -> None:
    checked, kinds = 0, set()
    for path in _kernel_files():
        state = kmsg_parse.LineState()
        for raw, event in _events(path):
            message = kernel._split_prefix(raw)[0]
            _agree(message, event, state)
            shared = kmsg_parse.classify(message)
            checked += shared is not None
            kinds |= {shared.kind} if shared is not None else set()
    assert checked >= 35  # the corpus's Xid and AER lines
    assert {"xid", "aer", "fell_off_bus", "gsp_timeout", "gsp_error", "aer_surprise_down"} <= kinds


@pytest.mark.parametrize(("line", "expected"), KMSG_LINES)
def test_both_callers_read_every_kmsg_fixture_alike(
    line: str, expected: kmsg_parse.KernelLine | None
) -> None:
    assert kmsg_parse.classify(line) == expected
    _agree(line, _one(line))


# What investigate read on these lines before the shared parser -> now (kind, component, code).
CHANGED = [
    (
        "pcieport 0000:00:1d.0: AER: Multiple Corrected error received: id=00e8",
        ("aer", "0000:00:1d.0", None),
        ("aer", "0000:00:1d.0", 0),
    ),
    (
        "pcieport 0000:80:1b.4: AER: Uncorrectable (Non-Fatal) error message received from 0000:80:1b.4",
        ("aer_detail", "0000:80:1b.4", None),
        ("aer", "0000:80:1b.4", 1),
    ),
    (
        "pcieport 0000:80:1b.4: AER: Correctable error message received from 0000:80:1b.4",
        ("aer_detail", "0000:80:1b.4", None),
        ("aer", "0000:80:1b.4", 0),
    ),
    (
        "pcieport 0000:3a:00.0: AER: Uncorrected (Fatal) error received: 0000:3b:00.0",
        ("aer", "0000:3a:00.0", 2),
        ("aer", "0000:3b:00.0", 2),
    ),  # the error source behind the port
    (
        "mlx5_core 0000:01:00.0 enp1s0f0np0: Link down",
        ("nic_link", "mlx5_core", 0),
        ("nic_link", "enp1s0f0np0", 0),
    ),
    ("mlx5_core 0000:53:00.0 mlx5_3: Port: 1 Link DOWN", None, ("nic_link", "mlx5_3", 0)),
    (
        "bond0: (slave enp83s0f0np0): link status definitely down, disabling slave",
        None,
        ("nic_link", "enp83s0f0np0", 0),
    ),
    ("IPv6: ADDRCONF(NETDEV_CHANGE): ib0: link becomes ready", None, ("nic_link", "ib0", 1)),
    # later: CPU thermal and machine-check lines (investigate had no reading of them), a GHES line that starts
    # with its record number `{1}` (read as a failed JSON line before)
    (
        "CPU0: Package temperature above threshold, cpu clock throttled (total events = 4128)",
        None,
        ("cpu_thermal", None, 1),
    ),
    ("mce: [Hardware Error]: CPU 2: Machine Check: 0 Bank 5: bea0000000000108", None, ("mce", None, 5)),
    ("{1}[Hardware Error]: event severity: corrected", None, ("mce", None, None)),
]


@pytest.mark.parametrize(("line", "before", "now"), CHANGED)
def test_lines_investigate_now_reads_as_the_collector_does(
    line: str, before: tuple[str, str | None, int | None] | None, now: tuple[str, str | None, int | None]
) -> None:
    event = _one(line)
    assert event is not None
    assert (event.kind, event.component, event.code) == now != before


def test_a_redacted_xid_is_read_by_investigate_and_left_to_other_by_the_collector() -> None:
    line = "kernel: NVRM: Xid (PCI:...): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 11 (...)"  # evals/real, xid145 case
    event = _one(line)
    assert event is not None and (event.kind, event.code, event.component) == ("xid", 145, None)
    assert kmsg_parse.classify(kernel._split_prefix(line)[0]) is None  # /dev/kmsg never redacts a bus id


def test_older_bonding_wording_is_a_link_change_for_both_callers() -> None:
    down = "bond0: link status definitely down for interface eno50, disabling it"  # evals/real, coreos case
    up = "bond0: link status definitely up for interface eno50, 10000 Mbps full duplex"
    assert kmsg_parse.classify(down) == kmsg_parse.KernelLine("link", 0, None, "eno50")
    assert kmsg_parse.classify(up) == kmsg_parse.KernelLine("link", 1, None, "eno50")
    for line in (down, up):
        _agree(line, _one(line))
    assert kmsg_parse.classify("bond1: now running without any active interface!") is None


def test_machine_checks_are_findings_and_name_no_gpu(tmp_path: Path) -> None:
    path = tmp_path / "dmesg.txt"
    path.write_text(
        "[11189.970968] EDAC MC3: 1 UE memory read error on CPU_SrcID#1_MC#1_Chan#2_DIMM#0 (channel:2 slot:0)\n"
        "[11219.196673] mce: [Hardware Error]: Machine check events logged\n",
        encoding="utf-8",
    )
    result = investigate([path])
    assert result["verdict"] == "inconclusive"
    assert result["hypotheses"] == []
    assert [f["title"] for f in result["findings"]] == ["mce", "mce"]


def test_a_mig_xid_names_its_gpu_for_both_callers() -> None:
    # NVIDIA "GPU Memory Error Management", uncorrectable ECC Xid log examples (contained error, MIG enabled)
    line = "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No"
    assert kmsg_parse.classify(line) == kmsg_parse.KernelLine("xid", 94, "0000:01:00.0")
    event = _one(line)
    assert event is not None and (event.kind, event.code, event.component) == ("xid", 94, "0000:01:00.0")
    _agree(line, event)
