"""scripts/fleet_demo_browser.py reads the running fleet demo from the `demo.json` scripts/fleet_demo.py writes in
its folder (the console's URL, the approver, the files of its password and key): a folder as the demo leaves it
is read, and each thing missing or wrong is one CheckFailed naming the file and the field. The browser checks
themselves need the full demo (minutes): `make fleet-demo-check` runs them (docs/FLEET.md); not in this suite."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


browser = _script("fleet_demo_browser")
fleet_demo = _script("fleet_demo")


def _demo_folder(tmp_path: Path) -> Path:
    """A folder as the demo writes it: demo.json by fleet_demo.write_state, the password file, the key."""
    demo = fleet_demo.Demo(
        tmp_path, console_url="http://127.0.0.1:41234", prometheus_url="http://127.0.0.1:1"
    )
    (tmp_path / "console-password").write_text("s3cret\n")
    demo.key.parent.mkdir()
    demo.key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    fleet_demo.write_state(demo)
    return tmp_path


def test_the_browser_check_reads_the_folder_the_demo_writes(tmp_path: Path) -> None:
    state = browser.read_state(_demo_folder(tmp_path))
    assert (state.console_url, state.user, state.password) == ("http://127.0.0.1:41234", "oncall", "s3cret")
    assert state.key == tmp_path / "keys" / "id_oncall" and state.pid > 0
    assert browser.STATE == fleet_demo.STATE


def _drop_file(name: str) -> Any:
    return lambda data, folder: (folder / name).unlink()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (_drop_file("demo.json"), "demo.json does not exist: is a fleet demo running there"),
        (lambda data, folder: data.update(broken=True), "not readable JSON"),
        (lambda data, folder: data.pop("console_url"), "field 'console_url' missing"),
        (
            lambda data, folder: data.update(console_url="file:///etc/passwd"),
            "console_url 'file:///etc/passwd'",
        ),
        (lambda data, folder: data.update(pid="12"), "pid '12' is not an integer"),
        (_drop_file("console-password"), "console-password (password_file)"),
        (lambda data, folder: data.update(key="keys/id_nobody"), "id_nobody (key): no such signing key"),
    ],
)
def test_a_folder_without_a_running_demo_is_named(tmp_path: Path, change: Any, named: str) -> None:
    folder = _demo_folder(tmp_path)
    data = json.loads((folder / "demo.json").read_text())
    change(data, folder)
    if (folder / "demo.json").exists():
        text = json.dumps(data)
        (folder / "demo.json").write_text(text[:-1] if data.pop("broken", False) else text)
    with pytest.raises(browser.CheckFailed, match="demo folder") as failed:
        browser.read_state(folder)
    assert named in str(failed.value) and failed.value.check == "demo folder"
