"""aiops/profile without eBPF: views, folded text, hostile frame names in the SVG, speedscope, privileges, the
NVML utilisation source, and the CLI's refusals (exit 2 with a message naming the problem)."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pynvml
import pytest

from aiops.cli.main import main
from aiops.profile.flamegraph import flamegraph_svg
from aiops.profile.folded import StackRecord, folded_text, parse_folded, view_weights
from aiops.profile.gpu import NvmlUtilSource, gpu_state
from aiops.profile.probes import CAP_BPF, CAP_PERFMON, loaded_libraries, privilege_problem
from aiops.profile.speedscope import speedscope_document
from aiops.scenarios import parse_scenario
from aiops.sim.world import World

HOSTILE = '</text><script>alert("x")</script>&amp;\x07 ; name'
RECORDS = [
    StackRecord(("main", "feed", "cudaLaunchKernel"), "cudaLaunchKernel", "launch", 30, 0, "busy"),
    StackRecord(
        ("main", "wait", "cudaDeviceSynchronize"), "cudaDeviceSynchronize", "sync", 10, 5_000_000, "idle"
    ),
    StackRecord(("main", HOSTILE), "cpu", "cpu", 7, 0, "idle"),
    StackRecord(("main", "busywork"), "cpu", "cpu", 5, 0, "busy"),
]


def test_views_pick_their_records_and_units() -> None:
    assert sum(view_weights(RECORDS, "calls").values()) == 40
    assert list(view_weights(RECORDS, "launch")) == [("main", "feed", "cudaLaunchKernel")]
    assert view_weights(RECORDS, "blocked") == Counter({("main", "wait", "cudaDeviceSynchronize"): 5000})
    assert view_weights(RECORDS, "idle") == Counter({("main", HOSTILE): 7})
    with pytest.raises(ValueError, match="allowed: calls, launch, blocked, idle"):
        view_weights(RECORDS, "nope")


def test_folded_text_round_trips_and_cleans_separators() -> None:
    text = folded_text(view_weights(RECORDS, "idle"))
    assert text.count("\n") == 1 and ";" not in text.split(";", 1)[1].rsplit(" ", 1)[0]
    assert parse_folded(folded_text(view_weights(RECORDS, "calls"))) == view_weights(RECORDS, "calls")


def test_svg_is_well_formed_with_hostile_frame_names() -> None:
    views = {view: view_weights(RECORDS, view) for view in ("calls", "launch", "blocked", "idle")}
    svg = flamegraph_svg(views, 'title <with> "quotes" & more')
    root = ET.fromstring(svg.encode())  # raises on anything unescaped
    namespace = "{http://www.w3.org/2000/svg}"
    assert len(root.findall(f".//{namespace}script")) == 1  # only ours
    titles = [element.text or "" for element in root.iter(f"{namespace}title")]
    assert any("alert" in title and "</text>" in title for title in titles)  # kept as text, escaped
    assert "http" not in svg.replace("http://www.w3.org/2000/svg", "")  # self-contained


def test_speedscope_document_shape() -> None:
    views = {"calls": view_weights(RECORDS, "calls"), "blocked": view_weights(RECORDS, "blocked")}
    document = json.loads(json.dumps(speedscope_document(views, "t")))
    assert [profile["unit"] for profile in document["profiles"]] == ["none", "microseconds"]
    frames = [frame["name"] for frame in document["shared"]["frames"]]
    first = document["profiles"][0]
    assert [frames[i] for i in first["samples"][0]] == ["main", "feed", "cudaLaunchKernel"]
    assert first["endValue"] == sum(first["weights"]) == 40


def test_privilege_needs_root_or_bpf_and_perfmon() -> None:
    assert privilege_problem(0, 0) is None
    assert privilege_problem(1000, (1 << CAP_BPF) | (1 << CAP_PERFMON)) is None
    problem = privilege_problem(1000, 1 << CAP_BPF)
    assert problem is not None and "CAP_BPF and CAP_PERFMON" in problem


def test_gpu_state_threshold() -> None:
    assert [gpu_state(None), gpu_state(3.0), gpu_state(10.0)] == ["unknown", "idle", "busy"]


def test_nvml_source_reads_the_simulators_device_utilisation() -> None:
    scenario = {
        "name": "u",
        "cluster": {"racks": 1, "nodes_per_rack": 1, "gpus_per_node": 2, "nics_per_node": 1},
    }
    world = World(parse_scenario(scenario))
    nvml = world.nvml(0)
    source = NvmlUtilSource(nvml, pid=1)
    assert source.sample_pct() is None  # not initialised: an NVMLError, not a crash
    nvml.nvmlInit()
    world.step(1.0)
    value = source.sample_pct()
    assert value is not None and value > 90 and source.source == "device"


@dataclass
class _Sample:
    pid: int
    smUtil: int


class _ProcessNvml:
    NVMLError = pynvml.NVMLError

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetProcessUtilization(self, handle: int, last_seen: int) -> list[_Sample]:
        return [_Sample(41, 3), _Sample(42, 17)]

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> object:
        raise AssertionError("per-process samples should have been used")


def test_nvml_source_prefers_the_targets_process_samples() -> None:
    source = NvmlUtilSource(_ProcessNvml(), pid=42)
    assert source.sample_pct() == 17.0 and source.source == "process"


def test_libraries_found_in_maps_and_gone_pid(tmp_path: Path) -> None:
    assert loaded_libraries(os.getpid()).keys() <= {"libcudart", "libcuda", "libnccl"}
    assert main(["profile", "--pid", "999999999", "--out", str(tmp_path)]) == 2


@pytest.mark.parametrize("duration", ["-1", "0", "nan", "inf"])
def test_cli_refuses_bad_durations(duration: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "--pid", "1", "--duration-s", duration, "--out", str(tmp_path)]) == 2
    assert "--duration-s" in capsys.readouterr().err


def test_cli_names_the_libraries_it_looked_for(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "--pid", str(os.getpid()), "--duration-s", "1", "--out", str(tmp_path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "no CUDA library" in err and "libcudart.so*" in err and "libnccl.so*" in err


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def test_svg_zoom_and_search_run_in_a_browser(tmp_path: Path) -> None:
    """The inline script in headless Chromium: zooming to feed_launches widens it to the full panel and hides
    its siblings; searching 'wait' matches wait_gpu and wait_inner under it, counted once (20 %, not 40 %)."""
    if CHROMIUM is None:
        pytest.skip("chromium not installed")
    weights = Counter(
        {
            ("main", "feed_launches", "cudaLaunchKernel"): 60,
            ("main", "wait_gpu", "wait_inner"): 20,
            ("main", "copy_inputs", "cudaMemcpy"): 20,
        }
    )
    svg = flamegraph_svg({"calls": weights}, "t")
    probe = """<script><![CDATA[
var g = document.querySelector('g.f[data-n="feed_launches"]'); zoom(g); searchFor('wait');
var out = document.createElementNS('http://www.w3.org/2000/svg', 'text'); out.setAttribute('id', 'result');
out.textContent = JSON.stringify({feed: g.querySelector('rect').getAttribute('width'),
  copy: document.querySelector('g.f[data-n="copy_inputs"]').style.display,
  matched: document.getElementById('matched').textContent});
document.documentElement.appendChild(out);
]]></script></svg>"""
    page = tmp_path / "flame.svg"
    page.write_text(svg.replace("</svg>", probe))
    done = subprocess.run(
        [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    found = re.search(r'id="result">([^<]*)<', done.stdout)
    assert found is not None, done.stdout[-2000:]
    result = json.loads(html.unescape(found.group(1)))
    assert result == {"feed": "1200.0", "copy": "none", "matched": "matched: calls 20.0%"}
