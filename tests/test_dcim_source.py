"""The DCIM input over HTTP (and from a file), against a real loopback HTTP server: a valid document (JSON, or
YAML when the answer says so) becomes signals; an oversized, malformed, slow, redirected, failing or absent
answer is one DcimSignalError naming the URL, the hostile body escaped, never a crash or a hang."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from aiops.control.dcim_source import MAX_BODY_BYTES, read_dcim
from aiops.errors import DcimSignalError
from tests.service_helpers import free_port


class Dcim(BaseHTTPRequestHandler):
    # path -> (status, content type, body, seconds to wait between 1-byte pieces: a trickle)
    routes: ClassVar[dict[str, tuple[int, str, bytes, float]]] = {}

    def do_GET(self) -> None:
        status, kind, body, trickle_s = type(self).routes.get(self.path, (404, "text/plain", b"no", 0.0))
        self.send_response(status)
        if status in (301, 302):
            self.send_header("Location", "http://192.0.2.1/elsewhere")
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            if trickle_s:
                for i in range(len(body)):
                    self.wfile.write(body[i : i + 1])
                    self.wfile.flush()
                    time.sleep(trickle_s)
            else:
                self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the reader gave up: what the test wants

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def dcim() -> Iterator[str]:
    Dcim.routes = {}
    server = ThreadingHTTPServer(("127.0.0.1", 0), Dcim)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_json_document_becomes_signals(dcim: str) -> None:
    Dcim.routes["/caps"] = (200, "application/json", b'{"rack1": {"kw": 18}, "fleet": {"clear": true}}', 0.0)
    signals = read_dcim(f"{dcim}/caps", 100.0, ["rack0", "rack1"])
    assert [(s.scope, s.kind, s.budget_kw, s.ts_s) for s in signals] == [
        ("rack1", "cap", 18.0, 100.0),
        ("fleet", "clear", None, 100.0),
    ]
    assert {s.source for s in signals} == {f"http:{dcim}/caps"}


def test_a_yaml_answer_is_read_as_yaml(dcim: str) -> None:
    Dcim.routes["/caps.yaml"] = (200, "application/yaml", b"rack0:\n  kw: 12.5\n", 0.0)
    assert [(s.scope, s.budget_kw) for s in read_dcim(f"{dcim}/caps.yaml", 1.0)] == [("rack0", 12.5)]


def test_a_file_source_reads_the_same_document(tmp_path: Path) -> None:
    path = tmp_path / "caps.json"
    path.write_text('{"rack0": {"kw": 20}}')
    (signal,) = read_dcim(str(path), 5.0, ["rack0"])
    assert (signal.scope, signal.kind, signal.budget_kw, signal.source) == (
        "rack0",
        "cap",
        20.0,
        f"file:{path}",
    )


@pytest.mark.parametrize(
    ("route", "problem"),
    [
        ((200, "application/json", b"x" * (MAX_BODY_BYTES + 10), 0.0), "larger than"),
        ((200, "application/json", b'{"rack0": {"kw": 18}', 0.0), "not valid JSON"),
        ((200, "application/json", b"[1, 2]", 0.0), "a mapping of scope"),
        ((200, "application/json", b'{"rack9": {"kw": 18}}', 0.0), "not a DCIM scope here"),
        ((200, "application/json", b'{"rack0": {"kw": -3}}', 0.0), "out of range"),
        ((200, "application/json", b'{"rack0": {"kw": 1e999}}', 0.0), "finite number"),
        ((200, "application/json", b"[" * 100 + b"]" * 100, 0.0), "nest"),
        ((200, "application/json", b"\xff\xfe{}", 0.0), "not UTF-8"),
        ((200, "application/yaml", b"!!python/object:os.system {}", 0.0), "YAML"),
        ((500, "text/plain", b"boom\x1b[31m red", 0.0), "HTTP 500"),
        ((302, "text/plain", b"", 0.0), "HTTP 302"),
    ],
)
def test_a_bad_answer_is_one_clear_error(
    dcim: str, route: tuple[int, str, bytes, float], problem: str
) -> None:
    Dcim.routes["/caps"] = route
    with pytest.raises(DcimSignalError) as caught:
        read_dcim(f"{dcim}/caps", 1.0, ["rack0", "rack1"])
    message = str(caught.value)
    assert f"{dcim}/caps" in message and problem in message, message
    assert "\x1b" not in message and len(message.splitlines()) == 1, message


def test_a_trickling_answer_is_cut_off_at_the_timeout(dcim: str) -> None:
    Dcim.routes["/caps"] = (200, "application/json", b'{"rack0": {"kw": 18}}' + b" " * 200, 0.05)
    started = time.monotonic()
    with pytest.raises(DcimSignalError, match=r"no whole answer within 0\.5 s"):
        read_dcim(f"{dcim}/caps", 1.0, timeout_s=0.5)
    assert time.monotonic() - started < 3.0


def test_no_server_is_an_error_naming_the_url() -> None:
    url = f"http://127.0.0.1:{free_port()}/caps"
    with pytest.raises(DcimSignalError, match="no answer") as caught:
        read_dcim(url, 1.0, timeout_s=2.0)
    assert url in str(caught.value)
