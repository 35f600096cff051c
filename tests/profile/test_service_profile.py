"""The service's profiling trigger ([profile] on_incident) without eBPF: which diagnoses start a run, the rate
limit, the simulator and missing privilege said once, the /proc scan, and a run's outputs and stored summary
through the service's store access path (a fake profiler stands in for bcc)."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from aiops.config import ProfileConfig, parse_config
from aiops.errors import ConfigError, ProfileTargetError
from aiops.models import Hypothesis, Incident
from aiops.profile.folded import StackRecord
from aiops.profile.session import ProfileResult
from aiops.service.profile_trigger import CudaProcess, ProfileTrigger, find_cuda_processes
from aiops.store import Store


class FakeWorkspace:
    def __init__(self) -> None:
        self.store = Store()
        self.writes = 0

    @contextlib.contextmanager
    def write(self) -> Iterator[Store]:
        self.writes += 1
        yield self.store


def incident(incident_id: str = "INC-0007") -> Incident:
    return Incident(
        incident_id=incident_id,
        opened_ts_s=0.0,
        last_ts_s=1.0,
        title="t",
        severity="warning",
        components=["node0"],
        symptoms=[],
    )


def top(root_cause: str = "input_pipeline_bottleneck", component: str = "node0") -> Hypothesis:
    return Hypothesis(root_cause=root_cause, component=component, confidence=0.8, summary="s")


def fake_result(pid: int, duration_s: float, stop: threading.Event) -> ProfileResult:
    records = [
        StackRecord(("main", "loader", "decode"), "cpu", "cpu", 30, 0, "idle"),
        StackRecord(("main", "step", "cudaLaunchKernel"), "cudaLaunchKernel", "launch", 300, 0, "busy"),
    ]
    return ProfileResult(
        pid=pid,
        duration_s=duration_s,
        slice_s=0.1,
        probes=("cudaLaunchKernel",),
        libraries={"libcudart": "/x/libcudart.so.13"},
        records=records,
        util_pct=[5.0] * 4,
        idle_slices=4,
    )


def trigger(tmp_path: Path, **overrides: object) -> tuple[ProfileTrigger, FakeWorkspace, list[int]]:
    profiled: list[int] = []

    def profiler(pid: int, duration_s: float, stop: threading.Event) -> ProfileResult:
        profiled.append(pid)
        if pid == 666:
            raise ProfileTargetError("process 666 does not exist")
        return fake_result(pid, duration_s, stop)

    settings: dict[str, object] = {"on_incident": True, "duration_s": 2.0, "out_dir": str(tmp_path / "p")}
    workspace = FakeWorkspace()
    kwargs: dict[str, object] = {
        "profiler": profiler,
        "finder": lambda: [
            CudaProcess(666, 90, ("libcudart",)),
            CudaProcess(42, 50, ("libcudart",)),
            CudaProcess(43, 10, ("libcuda",)),
        ],
        "privilege": lambda: None,
    }
    kwargs.update({k: v for k, v in overrides.items() if k in ("finder", "privilege", "sim", "clock")})
    settings.update({k: v for k, v in overrides.items() if k in ProfileConfig.model_fields})
    made = ProfileTrigger(ProfileConfig(**settings), "/tmp/db.duckdb", "node0", workspace, **kwargs)  # type: ignore[arg-type]
    return made, workspace, profiled


def test_a_run_writes_outputs_and_stores_the_summary_skipping_a_vanished_process(tmp_path: Path) -> None:
    made, workspace, profiled = trigger(tmp_path, max_processes=2)
    assert made.on_event("diagnosed", incident(), top())
    assert made.thread is not None
    made.thread.join(timeout=10)
    assert profiled == [666, 42]  # the busiest two; 666 vanished and is skipped, 43 is not profiled
    assert made.runs == 1 and workspace.writes == 1
    row = workspace.store.query("SELECT run_id, node, pid, idle_slices FROM profile_runs")[0]
    assert (row["node"], row["pid"], row["idle_slices"]) == ("node0", 42, 4)
    stacks = workspace.store.query("SELECT stack, share FROM profile_stacks WHERE view = 'idle'")
    assert stacks == [{"stack": "main;loader;decode", "share": 1.0}]
    (out,) = (tmp_path / "p").iterdir()
    assert out.name.startswith("INC-0007-pid42-")
    assert {"flamegraph.svg", "summary.json", "idle.folded"} <= {p.name for p in out.iterdir()}


@pytest.mark.parametrize(
    ("kind", "hypothesis"),
    [
        ("opened", top()),
        ("diagnosed", None),
        ("diagnosed", top("thermal_throttle")),
        ("diagnosed", top(component="node3")),  # another node's incident
    ],
)
def test_only_a_diagnosis_with_a_profiling_label_on_this_node_triggers(
    tmp_path: Path, kind: str, hypothesis: Hypothesis | None
) -> None:
    made, _, profiled = trigger(tmp_path)
    assert not made.on_event(kind, incident(), hypothesis)
    assert made.thread is None and profiled == []


def test_application_error_on_a_gpu_of_this_node_triggers(tmp_path: Path) -> None:
    made, _, _ = trigger(tmp_path)
    assert made.on_event("diagnosed", incident(), top("application_error", "node0/gpu3"))
    assert made.thread is not None
    made.thread.join(timeout=10)


def test_off_by_default(tmp_path: Path) -> None:
    assert ProfileConfig().on_incident is False
    made, _, _ = trigger(tmp_path, on_incident=False)
    assert not made.on_event("diagnosed", incident(), top())


def test_rate_limit_per_hour(tmp_path: Path) -> None:
    now = [1000.0]
    made, _, _ = trigger(tmp_path, max_per_hour=2, clock=lambda: now[0])
    started = []
    for _ in range(3):
        started.append(made.on_event("diagnosed", incident(), top()))
        assert made.thread is not None
        made.thread.join(timeout=10)
    assert started == [True, True, False]
    now[0] += 3600.0
    assert made.on_event("diagnosed", incident(), top())  # an hour later the window has room again
    assert made.thread is not None
    made.thread.join(timeout=10)


def test_sim_and_missing_privilege_and_no_cuda_are_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="aiops.service.profile")
    made, _, profiled = trigger(tmp_path, sim=True)
    made.start()
    assert not made.on_event("diagnosed", incident(), top())
    assert [r.message for r in caplog.records].count(
        "profile on_incident: the simulator's twin has no CUDA processes; nothing will be profiled"
    ) == 1
    caplog.clear()
    made, _, profiled = trigger(tmp_path, privilege=lambda: "attaching uprobes needs root")
    assert made.run("INC-1", "input_pipeline_bottleneck") == made.run("INC-2", "application_error") == []
    assert [r.message for r in caplog.records] == ["profile on_incident: attaching uprobes needs root"]
    assert profiled == []
    caplog.clear()
    made, _, profiled = trigger(tmp_path, finder=list)
    assert made.run("INC-1", "input_pipeline_bottleneck") == made.run("INC-2", "application_error") == []
    assert len(caplog.records) == 1 and "no process on this host" in caplog.records[0].message


def test_a_failing_profiler_is_logged_not_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    def broken(pid: int, duration_s: float, stop: threading.Event) -> ProfileResult:
        raise RuntimeError("bcc exploded")

    made, _, _ = trigger(tmp_path)
    made.profiler = broken
    assert made.run("INC-1", "input_pipeline_bottleneck") == []
    assert any("bcc exploded" in r.message for r in caplog.records)


def write_proc(root: Path, pid: int, maps: str, utime: int, stime: int, name: str = "py thon)") -> None:
    entry = root / str(pid)
    entry.mkdir()
    (entry / "maps").write_text(maps)
    fields = ["S"] + ["0"] * 10 + [str(utime), str(stime)] + ["0"] * 30
    (entry / "stat").write_text(f"{pid} ({name}) {' '.join(fields)}\n")


def test_find_cuda_processes_scans_maps_busiest_first(tmp_path: Path) -> None:
    lib = "7f0000000000-7f0000001000 r-xp 00000000 08:01 123 "
    write_proc(tmp_path, 10, lib + "/usr/local/cuda/lib64/libcudart.so.13.0.48\n", 5, 5)
    write_proc(
        tmp_path,
        11,
        lib + "/usr/lib/x86_64-linux-gnu/libcuda.so.1 (deleted)\n" + lib + "/x/libnccl.so.2\n",
        50,
        1,
    )
    write_proc(tmp_path, 12, lib + "/usr/lib/libc.so.6\n", 900, 0)  # no CUDA
    write_proc(tmp_path, 13, lib + "/usr/local/cuda/lib64/libcudart.so.13\n", 999, 0)  # excluded (ourselves)
    (tmp_path / "14").mkdir()  # vanished: no maps
    (tmp_path / "self").mkdir()
    found = find_cuda_processes(tmp_path, exclude=frozenset({13}))
    assert found == [CudaProcess(11, 51, ("libcuda", "libnccl")), CudaProcess(10, 10, ("libcudart",))]
    assert len(find_cuda_processes(tmp_path, max_pids=1)) <= 1  # bounded


def test_config_section_validates_labels() -> None:
    config = parse_config({"profile": {"on_incident": True, "labels": "application_error"}}, "f.toml")
    assert config.profile.label_set() == frozenset({"application_error"})
    with pytest.raises(ConfigError) as caught:
        parse_config({"profile": {"labels": "input_pipeline_bottleneck,made_up"}}, "f.toml")
    assert caught.value.field == "profile.labels" and "thermal_throttle" in str(caught.value)
    with pytest.raises(ConfigError):
        parse_config({"profile": {"duration_s": 0}}, "f.toml")


def test_the_service_wires_the_trigger_behind_notifications_and_stores_through_its_owner(
    tmp_path: Path,
) -> None:
    from aiops.service.service import Service

    config = parse_config(
        {
            "store": {"path": str(tmp_path / "ws.duckdb")},
            "node": {"name": "node0"},  # the incident's node (unset: this host's own name)
            "profile": {"on_incident": True, "duration_s": 1.0, "out_dir": str(tmp_path / "p")},
        },
        "f.toml",
    )
    service = Service(config)
    made, _, profiled = trigger(tmp_path)
    service.profiles.finder, service.profiles.privilege = made.finder, made.privilege
    service.profiles.profiler = made.profiler
    try:
        with service.owner.store() as store:
            assert service.responder.notify is not None
            service.responder.notify(store, "diagnosed", incident(), top())
            # the notification returned while the flush holds the store: the run waits for it in its thread
            assert service.profiles.thread is not None and service.profiles.thread.is_alive()
            assert store.scalar("SELECT count(*) FROM profile_runs") == 0
        service.profiles.thread.join(timeout=10)
        with service.owner.store() as store:
            assert store.scalar("SELECT pid FROM profile_runs") == 42
        assert service.profiles.runs == 1 and profiled == [666, 42]
    finally:
        service.owner.close()
