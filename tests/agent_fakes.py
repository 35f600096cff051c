"""An OpenAI-protocol chat server on 127.0.0.1 for agent tests: POST /v1/chat/completions answers from a
script (replies with content or tool_calls, HTTP errors, malformed bodies, or a stall past the client timeout).
The real `openai` client talks to it; nothing leaves the machine."""

from __future__ import annotations

import json
import os
import re
import select
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Step = dict[str, Any]


def tool_call(name: str, arguments: dict[str, Any] | str, call_id: str = "call_1") -> Step:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {
        "message": {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}}],
        }
    }


def final(answer: str, claims: list[Any] | None = None, proposals: list[Any] | None = None) -> Step:
    body = {"answer": answer, "claims": claims or [], "proposals": proposals or []}
    return {"message": {"role": "assistant", "content": json.dumps(body)}}


def text(content: str) -> Step:
    return {"message": {"role": "assistant", "content": content}}


def cut(content: str) -> Step:
    """A reply cut at max_tokens, as a server sends it: its text so far, finish_reason "length"."""
    return {"message": {"role": "assistant", "content": content}, "finish_reason": "length"}


def http_error(status: int) -> Step:
    return {"status": status}


def raw_body(body: bytes) -> Step:
    return {"raw": body}


def stall(seconds: float) -> Step:
    return {"sleep": seconds}


def after(hook: Any, step: Step) -> Step:
    """`step`, answered once `hook()` returned (the world moves on while the model thinks)."""
    return {**step, "before": hook}


class ScriptedLLM:
    def __init__(self, script: list[Step]) -> None:
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                with owner.lock:
                    owner.requests.append({"path": self.path, "body": body})
                    step = owner.script.pop(0) if owner.script else text('{"answer": "script exhausted"}')
                if self.path.rstrip("/") != "/v1/chat/completions":
                    return self._send(404, b'{"error": {"message": "not found"}}')
                if "before" in step:
                    step["before"]()
                if "sleep" in step:
                    time.sleep(step["sleep"])
                    return self._send(200, json.dumps(_completion(text("late")["message"])).encode())
                if "status" in step:
                    return self._send(
                        step["status"], b'{"error": {"message": "scripted failure", "type": "server_error"}}'
                    )
                if "raw" in step:
                    return self._send(200, step["raw"])
                self._send(200, json.dumps(_completion(step["message"], step.get("finish_reason"))).encode())

            def _send(self, status: int, payload: bytes) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def push(self, *steps: Step) -> None:
        with self.lock:
            self.script.extend(steps)


def _completion(message: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": "scripted",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason or ("tool_calls" if message.get("tool_calls") else "stop"),
            }
        ],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
    }


@contextmanager
def scripted_llm(script: list[Step]) -> Iterator[ScriptedLLM]:
    server = ScriptedLLM(script)
    server.thread.start()
    try:
        yield server
    finally:
        server.server.shutdown()
        server.server.server_close()


TINY_SCENARIO = """\
name: tiny-fan
seed: 3
duration_s: 300
cluster: {racks: 1, nodes_per_rack: 2, gpus_per_node: 2, nics_per_node: 1}
jobs:
  - {name: llm, nodes: all, step_compute_s: 1.0, allreduce_mb: 64}
faults:
  - {kind: thermal_throttle, target: node1/gpu1, start_s: 90, severity: 0.8}
"""


def _build_tiny(folder: Any) -> None:
    from aiops.cli.main import main

    scenario = folder / "tiny.yaml"
    scenario.write_text(TINY_SCENARIO, encoding="utf-8")
    assert main(["demo", "--scenario", str(scenario), "--db", str(folder / "demo.duckdb"), "--json"]) == 0


def tiny_demo_db(tmp_path: Any) -> tuple[Any, Any]:
    """A fresh copy of a tiny `aiops demo` database (built once per test run: tests/shared_templates.py) and its
    scenario file."""
    import shutil
    from pathlib import Path

    from tests.shared_templates import template

    built = template("tiny-demo", _build_tiny)
    db = Path(tmp_path) / "demo.duckdb"
    shutil.copy(built / "demo.duckdb", db)  # the workspace is the one file: its twin is rebuilt from it
    shutil.copy(built / "demo.duckdb.witness", f"{db}.witness")  # and the audit chain's witness beside it
    scenario = Path(tmp_path) / "tiny.yaml"
    shutil.copy(built / "tiny.yaml", scenario)
    return db, scenario


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")


class Repl:
    """Drives an interactive process over a file descriptor (a pty master or a pipe): send lines, expect text."""

    def __init__(self, read_fd: int, write: Any) -> None:
        self.read_fd = read_fd
        self.write = write
        self.seen = ""

    def expect(self, pattern: str, timeout_s: float = 30.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout_s
        regex = re.compile(pattern)
        while True:
            match = regex.search(self.seen)
            if match:
                return match
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"timed out waiting for {pattern!r}; output so far:\n{self.seen[-3000:]}"
                )
            ready, _, _ = select.select([self.read_fd], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.read_fd, 65536)
                except OSError:  # EIO: the pty's other side closed
                    chunk = b""
                if not chunk:
                    raise AssertionError(f"process ended before {pattern!r}; output:\n{self.seen[-3000:]}")
                self.seen += ANSI.sub("", chunk.decode("utf-8", "replace"))

    def send(self, line: str) -> None:
        self.seen = ""
        self.write((line + "\n").encode())
