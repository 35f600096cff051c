"""`aiops investigate`: the JSON contract, exit codes for bad input, `--db`, and hostile text shown as text."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from aiops.cli.main import main

REAL = Path(__file__).resolve().parents[2] / "evals" / "real"
XID79 = REAL / "xid79-aer-surprise-down-tesla-2018" / "dmesg.txt"


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert main(["investigate", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_json_follows_the_contract(capsys: pytest.CaptureFixture[str]) -> None:
    result = _json(capsys, str(XID79))
    assert {"verdict", "hypotheses", "incidents", "proposals", "sources"} <= set(result)
    assert result["verdict"] == "diagnosed"
    top = result["hypotheses"][0]  # type: ignore[index]
    assert top["root_cause"] == "gpu_fell_off_bus" and top["confidence"] >= 0.9
    assert top["evidence"][0]["source"] == "dmesg.txt:13"
    assert "79, GPU has fallen off the bus" in top["evidence"][0]["rows"][0]
    assert result["sources"] == [
        {
            "file": "dmesg.txt",
            "format": "kernel-log",
            "lines": 13,
            "parsed": 13,
            "unknown": 0,
            "understood": 0.92,
        }
    ]  # one line of the 13 read by the generic reader, not the kernel's parser (`understood`: reading.py)


def test_watchdog_timeouts_alone_are_inconclusive(capsys: pytest.CaptureFixture[str]) -> None:
    result = _json(capsys, str(REAL / "nccl-watchdog-allreduce-v100-ofa-2022" / "pytorch.log"))
    assert result["verdict"] == "inconclusive" and result["hypotheses"] == []
    assert result["findings"][0]["source"] == "pytorch.log:1"  # type: ignore[index]


def test_several_files_are_read_together(capsys: pytest.CaptureFixture[str]) -> None:
    case = REAL / "ib-link-unstable-polling-rdma-link-rccl-2024"
    result = _json(capsys, *(str(case / f"rdma-link-{i}.txt") for i in (1, 2, 3)))
    assert [s["file"] for s in result["sources"]] == ["rdma-link-1.txt", "rdma-link-2.txt", "rdma-link-3.txt"]  # type: ignore[union-attr,index]
    assert result["hypotheses"][0]["root_cause"] == "nic_link_flap"  # type: ignore[index]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty file"),
        (b"\n  \n", "empty file"),
        (b"\x7fELF\x02\x01\x01\x00\x00\x00" * 50, "binary file"),
        (bytes(range(128, 256)) * 40, "binary file"),
    ],
)
def test_bad_input_exits_2_naming_the_file_and_formats(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, message: str
) -> None:
    """Alone, a file that cannot be read as evidence exits 2 naming it and the formats accepted
    (../shared/ARCHITECTURE.md: exit 2 only when no file at all could be read or recognised)."""
    path = tmp_path / "evidence.log"
    path.write_bytes(content)
    assert main(["investigate", str(path), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no partial JSON
    assert str(path) in captured.err and message in captured.err
    assert "kernel-log" in captured.err and "nvidia-smi-q" in captured.err and "Traceback" not in captured.err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty file"),
        (b"\x7fELF\x02\x01\x01\x00\x00\x00" * 50, "binary file"),
    ],
)
def test_bad_input_beside_good_evidence_is_listed_not_fatal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, message: str
) -> None:
    """Beside a readable file, the bad one is listed in `sources` with its reason and skipped: the rest of
    the evidence is still diagnosed (issue 26: one unrecognised file aborted the whole run)."""
    path = tmp_path / "evidence.log"
    path.write_bytes(content)
    result = _json(capsys, str(XID79), str(path))
    assert result["verdict"] == "diagnosed"
    skipped = result["sources"][1]  # type: ignore[index]
    assert skipped["file"] == "evidence.log" and skipped["format"] == "unrecognised"
    assert message in skipped["reason"] and skipped["parsed"] == 0


DPKG = (
    b"2025-06-24 14:36:25 startup archives unpack\n"
    b"2025-06-24 14:36:25 upgrade libsystemd0:amd64 252.36-1~deb12u1 252.38-1~deb12u1\n"
    b"2025-06-24 14:36:25 status triggers-pending libc-bin:amd64 2.36-9+deb12u10\n"
)


def test_a_log_of_another_program_is_read_not_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Issue 37: a readable text no parser recognises is read by the generic reader (exit 0): nothing in it
    failed, but a log is no positive reading, so the verdict is `inconclusive` and says why. This machine's own
    dpkg/apt log is used when there is one."""
    found = [p for p in (Path("/var/log/dpkg.log"), Path("/var/log/apt/history.log")) if p.is_file()]
    copy = tmp_path / "other.log"
    copy.write_bytes(found[0].read_bytes() if found else DPKG)
    result = _json(capsys, str(copy))
    assert result["sources"][0]["format"] == "generic"  # type: ignore[index]
    assert result["verdict"] == "inconclusive" and "status output" in str(result["verdict_reason"])


def test_missing_file_and_empty_directory_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["investigate", str(tmp_path / "nope.log")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main(["investigate", str(tmp_path)]) == 2  # a directory is a bundle: this one holds nothing
    assert "nothing could be read" in capsys.readouterr().err


def test_a_missing_file_beside_good_evidence_is_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = _json(capsys, str(XID79), str(tmp_path / "nope.log"))
    assert result["verdict"] == "diagnosed"
    assert result["sources"][1]["format"] == "unreadable"  # type: ignore[index]
    assert "cannot read" in result["sources"][1]["reason"]  # type: ignore[index]


def test_db_keeps_the_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "w.duckdb"
    result = _json(capsys, str(XID79), "--db", str(db))
    conn = duckdb.connect(str(db), read_only=True)
    try:
        rows = conn.execute(
            "SELECT investigation, source, line, kind, code FROM log_events WHERE kind = 'xid'"
        ).fetchall()
    finally:
        conn.close()
    assert rows == [(result["investigation"], "dmesg.txt", 13, "xid", 79)]


def test_hostile_lines_are_shown_as_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "dmesg.txt"
    log.write_text(
        "[ 10.000000] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\x1b]0;pwned\x07\x1b[2J\u202e[red]x[/]\n"
        "[ 11.000000] NVRM: Xid (PCI:0000:3b:00): 13, \x1b]52;c;ZXZpbA==\x07 Graphics Exception\r\n",
        encoding="utf-8",
    )
    assert main(["investigate", str(log)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "\\x1b]0;pwned" in out and "[red]x[/]" in out
    result = _json(capsys, str(log))
    assert "\x1b]0;pwned" in result["hypotheses"][0]["evidence"][0]["rows"][0]  # type: ignore[index]


def test_a_carriage_return_stays_inside_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "dmesg.txt"
    log.write_text("[ 1.000000] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen\roff the bus.\n[ 2.0] ok\n")
    result = _json(capsys, str(log))
    assert result["sources"][0]["lines"] == 2  # type: ignore[index]
    assert result["hypotheses"][0]["evidence"][0]["rows"] == [  # type: ignore[index]
        "[ 1.000000] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen\roff the bus."
    ]
