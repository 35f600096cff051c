"""The deployment files (deploy, docs/DEPLOY.md) agree with the configuration and with each other.

Nothing here runs systemd, a container engine or Kubernetes: the files are parsed (a small INI reader for
the unit, a line reader for the Containerfile, PyYAML for the manifests, shlex for the documented `podman
run`) and checked against `aiops.config`: the command and config path, one HTTP port everywhere, the
probed paths, every host path the config reads mounted (read-only where the collectors only read), the
capabilities the enabled collectors need, no privileged container the docs do not explain, and resources in
line with the overhead target. Where `systemd-analyze` exists the unit is also verified by it.
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
import shutil
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from aiops.config import Config, parse_config, parse_listen
from aiops.datapath.loader import BPFFS
from collectors.ebpf.tcp_probe import TRACEFS

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
DOC = ROOT / "docs" / "DEPLOY.md"
CONFIG_PATH = "/etc/aiops/config.toml"
COMMAND = ["aiops", "run", "--config", CONFIG_PATH]

# The agent's overhead target (docs/ARCHITECTURE.md) and what was measured at start (docs/DEPLOY.md).
CPU_TARGET_CORES = 0.02
RSS_TARGET_BYTES = 200 * 10**6
START_PEAK_BYTES = 150 * 2**20  # bcc compiling and attaching tcp_probe
MIN_STOP_S = 10.0  # time to flush the last batch and checkpoint DuckDB


# -- what a config needs from its host (pure) --------------------------------------------------------------
@dataclass(frozen=True)
class Need:
    path: str  # as the service sees it
    host_path: str  # what it must be on the host
    writable: bool
    reader: str


def host_needs(config: Config, kubelet: bool = False) -> list[Need]:
    """Every host path the enabled collectors, the lanes and the store read or write (`kubelet`: on a
    Kubernetes node, where the workloads collector asks the kubelet's pod-resources socket)."""
    root, c = PurePosixPath(config.collectors.root), config.collectors
    needs = []
    if any(x.enabled for x in (c.sysfs, c.net, c.infiniband)):
        needs.append(Need(str(root / "sys"), "/sys", False, "sysfs, net, infiniband, topology"))
    if c.procfs.enabled:
        needs.append(Need(str(root / "proc"), "/proc", False, "procfs"))
    if c.kmsg.enabled:
        needs.append(Need(str(root / "dev/kmsg"), "/dev/kmsg", False, "kmsg"))
    if c.lanes.enabled:  # the datapath's absolute paths, not under collectors.root
        needs += [
            Need(str(BPFFS), "/sys/fs/bpf", True, "lanes: pinned maps"),
            Need("/run/aiops", "/run/aiops", False, "lanes: state files (aiops.datapath.lanes.STATE_DIR)"),
            Need("/sys/fs/cgroup", "/sys/fs/cgroup", False, "lanes: cgroup ids of rules"),
            Need(TRACEFS, "/sys/kernel/tracing", False, "tcp_probe: tracepoints"),
            Need("/lib/modules", "/lib/modules", False, "bcc: kernel headers"),
            Need("/usr/src", "/usr/src", False, "bcc: kernel headers"),
        ]
    w = c.workloads
    if kubelet and w.enabled and w.kubernetes and w.pod_resources_socket:
        folder = str(PurePosixPath(w.pod_resources_socket).parent)
        needs.append(Need(folder, folder, False, "workloads: the kubelet's pod-resources socket"))
    store_dir = str(PurePosixPath(config.store.path).parent)
    return [*needs, Need(store_dir, store_dir, True, "store")]


def required_capabilities(config: Config) -> set[str]:
    caps = {"SYSLOG"} if config.collectors.kmsg.enabled else set()
    return caps | ({"BPF", "PERFMON", "NET_ADMIN"} if config.collectors.lanes.enabled else set())


@dataclass(frozen=True)
class Mount:
    path: str
    host_path: str | None  # None: not a host path (ConfigMap, Secret, emptyDir)
    read_only: bool


def covering(mounts: list[Mount], path: str) -> tuple[Mount, str | None]:
    """The mount that provides `path` (longest prefix) and the host path `path` then is."""
    hits = [m for m in mounts if path == m.path or path.startswith(m.path.rstrip("/") + "/")]
    assert hits, f"nothing is mounted at {path}"
    mount = max(hits, key=lambda m: len(m.path))
    rest = path[len(mount.path) :].lstrip("/")
    host = None if mount.host_path is None else str(PurePosixPath(mount.host_path) / rest)
    return mount, host


def check_needs(config: Config, mounts: list[Mount], kubelet: bool = False) -> None:
    for need in host_needs(config, kubelet):
        mount, host = covering(mounts, need.path)
        assert host == need.host_path, (
            f"{need.path} ({need.reader}) shows {host}, not the host's {need.host_path}"
        )
        assert mount.read_only is not need.writable, (
            f"{mount.path} ({need.reader}) must be {'writable' if need.writable else 'read-only'}"
        )


# -- parsers ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class UnitLine:
    section: str
    key: str
    value: str
    comment: str  # the comment lines right above it


def parse_unit(text: str) -> list[UnitLine]:
    """systemd's unit syntax: sections, key=value, whole-line comments (# or ;), trailing-backslash lines."""
    lines, section, comment, pending = [], "", [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if pending:
            line, pending = pending + " " + line, ""
        if line.endswith("\\"):
            pending = line[:-1].strip()
            continue
        if not line:
            comment = []
        elif line[0] in "#;":
            comment.append(line[1:].strip())
        elif line.startswith("["):
            section, comment = line.strip("[]"), []
        else:
            key, _, value = line.partition("=")
            lines.append(UnitLine(section, key.strip(), value.strip(), " ".join(comment)))
            comment = []
    return lines


def unit_values(key: str, section: str = "Service") -> list[str]:
    return [u.value for u in UNIT if u.section == section and u.key == key]


def unit_value(key: str) -> str:
    values = unit_values(key)
    assert len(values) == 1, f"{key}= is set {len(values)} times in aiops.service"
    return values[0]


def parse_containerfile(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    joined = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        joined = f"{joined} {line}" if joined else line
        if joined.endswith("\\"):
            joined = joined[:-1].rstrip()
            continue
        instruction, _, args = joined.partition(" ")
        out.append((instruction.upper(), args.strip()))
        joined = ""
    return out


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys; a manifest with a duplicate key is refused instead."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        keys = [self.construct_object(k, deep=deep) for k, _ in node.value]
        duplicates = sorted({str(k) for k in keys if keys.count(k) > 1})
        if duplicates:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate keys {duplicates}", node.start_mark
            )
        return super().construct_mapping(node, deep)


def load_manifests(path: Path) -> dict[str, dict[str, Any]]:
    docs = [d for d in yaml.load_all(path.read_text(), Loader=_UniqueKeyLoader) if d]
    kinds = [d["kind"] for d in docs]
    assert len(kinds) == len(set(kinds)), f"{path.name}: one object per kind expected, got {kinds}"
    return {d["kind"]: d for d in docs}


def podman_run(doc: str) -> list[str]:
    """The `podman run` command of docs/DEPLOY.md, as argv."""
    found = re.search(r"^podman run .*?(?<!\\)$", doc, flags=re.M | re.S)
    assert found, "docs/DEPLOY.md shows no `podman run` command"
    return shlex.split(found.group(0).replace("\\\n", " "))


def podman_mounts(argv: list[str]) -> list[Mount]:
    mounts = []
    for flag, value in itertools.pairwise(argv):
        if flag in ("-v", "--volume", "--device") and value.startswith("/"):
            parts = value.split(":")  # HOST[:CONTAINER[:OPTIONS]]
            ctr, options = (parts[1:2] or parts[:1])[0], (parts[2:3] or [""])[0]
            read_only = "w" not in options if flag == "--device" else "ro" in options.split(",")
            mounts.append(Mount(ctr, parts[0], read_only))
        if flag == "--tmpfs":
            mounts.append(Mount(value, None, False))
    return mounts


def quantity(value: str | int | float) -> float:
    """A Kubernetes quantity (50m, 256Mi, 1G, 0.5) as a number of cores or bytes."""
    text = str(value)
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "k": 1e3, "M": 1e6, "G": 1e9}
    for suffix, factor in sorted(units.items(), key=lambda kv: -len(kv[0])):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


# -- the files ---------------------------------------------------------------------------------------------
UNIT = parse_unit((DEPLOY / "aiops.service").read_text())
CONTAINERFILE = parse_containerfile((DEPLOY / "Containerfile").read_text())
K8S = load_manifests(DEPLOY / "daemonset.yaml")
SECRET = load_manifests(DEPLOY / "http-token-secret.yaml")["Secret"]
DOC_TEXT = DOC.read_text()
POD = K8S["DaemonSet"]["spec"]["template"]["spec"]
CONTAINER = next(c for c in POD["containers"] if c["name"] == "aiops")
VOLUMES = {v["name"]: v for v in POD["volumes"]}


def instruction(name: str) -> list[str]:
    return [args for instr, args in CONTAINERFILE if instr == name]


def pod_mounts() -> list[Mount]:
    out = []
    for m in CONTAINER["volumeMounts"]:
        host = VOLUMES[m["name"]].get("hostPath", {}).get("path")
        out.append(Mount(m["mountPath"], host, bool(m.get("readOnly", False))))
    return out


def load_toml(name: str) -> Config:
    return parse_config(tomllib.loads((DEPLOY / name).read_text()), name)


def pod_config() -> Config:
    """The config.toml the pod's command names, read from the ConfigMap mounted there."""
    path = PurePosixPath(CONTAINER["command"][-1])
    mount = next(m for m in CONTAINER["volumeMounts"] if m["mountPath"] == str(path.parent))
    configmap = K8S["ConfigMap"]
    assert VOLUMES[mount["name"]]["configMap"]["name"] == configmap["metadata"]["name"]
    return parse_config(tomllib.loads(configmap["data"][path.name]), f"ConfigMap {path.name}")


# -- tests -------------------------------------------------------------------------------------------------
def test_every_way_runs_aiops_run_with_its_config_file() -> None:
    assert CONTAINER["command"] == COMMAND
    assert json.loads(instruction("ENTRYPOINT")[0]) == COMMAND
    exec_start = shlex.split(unit_value("ExecStart"))
    assert PurePosixPath(exec_start[0]).name == "aiops" and exec_start[0].startswith("/")
    assert exec_start[1:] == COMMAND[1:]
    copied = [shlex.split(args) for args in instruction("COPY")]
    assert ["deploy/container.toml", CONFIG_PATH] in copied, "the image has no default config"


@pytest.mark.parametrize("name", ["pod", "container.toml", "host.toml"])
def test_configs_validate_and_use_their_layout(name: str) -> None:
    config = pod_config() if name == "pod" else load_toml(name)
    assert config.collectors.root == ("/" if name == "host.toml" else "/host")
    host, _ = parse_listen(config.http.listen)
    assert not config.http.token, "a token inline in a config file: use http.token_file"
    if host not in ("127.0.0.1", "::1", "localhost"):
        assert config.http.token_file, f"{name}: /api listens on {host} without a token"


def test_one_http_port_everywhere() -> None:
    port = parse_listen(pod_config().http.listen)[1]
    named = {p["name"]: p["containerPort"] for p in CONTAINER["ports"]}
    assert port in named.values()
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        ref = CONTAINER[probe]["httpGet"]["port"]
        assert named.get(ref, ref) == port, probe
    annotations = K8S["DaemonSet"]["spec"]["template"]["metadata"]["annotations"]
    assert int(annotations["prometheus.io/port"]) == port
    assert instruction("EXPOSE") == [str(port)]
    assert parse_listen(load_toml("container.toml").http.listen)[1] == port
    assert re.search(rf"https?://[^/:]+:{port}/healthz", instruction("HEALTHCHECK")[0])


def test_health_readiness_and_metrics_paths() -> None:
    paths = {
        probe: CONTAINER[probe]["httpGet"]["path"]
        for probe in ("startupProbe", "livenessProbe", "readinessProbe")
    }
    assert paths == {"startupProbe": "/healthz", "livenessProbe": "/healthz", "readinessProbe": "/readyz"}
    annotations = K8S["DaemonSet"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/path"] == "/metrics"


def test_the_pod_mounts_every_host_path_its_config_reads() -> None:
    check_needs(pod_config(), pod_mounts(), kubelet=True)
    assert VOLUMES["host-kmsg"]["hostPath"]["type"] == "CharDevice"
    store = next(m for m in CONTAINER["volumeMounts"] if m["mountPath"] == "/var/lib/aiops")
    assert VOLUMES[store["name"]]["hostPath"]["type"] == "DirectoryOrCreate"


def test_the_documented_podman_run_mounts_what_the_image_config_reads() -> None:
    argv = podman_run(DOC_TEXT)
    check_needs(load_toml("container.toml"), podman_mounts(argv))
    assert "--network" in argv and argv[argv.index("--network") + 1] == "host"
    assert "--privileged" not in argv
    caps = set(argv[argv.index("--cap-add") + 1].split(","))
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert caps == required_capabilities(load_toml("container.toml"))


def test_bpffs_propagates_from_the_host() -> None:
    mount = next(m for m in CONTAINER["volumeMounts"] if m["mountPath"] == str(BPFFS))
    assert mount.get("mountPropagation") in ("HostToContainer", "Bidirectional")
    if mount["mountPropagation"] == "Bidirectional":  # the API allows it in privileged containers only
        assert CONTAINER["securityContext"].get("privileged") is True


def test_the_api_token_comes_from_the_secret() -> None:
    token_file = PurePosixPath(pod_config().http.token_file)
    mount = next(m for m in CONTAINER["volumeMounts"] if m["mountPath"] == str(token_file.parent))
    volume = VOLUMES[mount["name"]]["secret"]
    assert mount.get("readOnly") is True and volume.get("optional") is not True
    assert volume["secretName"] == SECRET["metadata"]["name"]
    assert SECRET["metadata"]["namespace"] == K8S["DaemonSet"]["metadata"]["namespace"]
    assert token_file.name in {**SECRET.get("data", {}), **SECRET.get("stringData", {})}


def test_capabilities_and_nothing_privileged_unexplained() -> None:
    context = CONTAINER["securityContext"]
    assert set(context["capabilities"]["add"]) == required_capabilities(pod_config())
    assert context["capabilities"]["drop"] == ["ALL"]
    for c in POD["containers"] + POD.get("initContainers", []):
        if c.get("securityContext", {}).get("privileged"):
            assert f"`{c['name']}` runs privileged because" in DOC_TEXT, f"{c['name']} is privileged"
    if "SYS_ADMIN" not in context["capabilities"]["add"] and not context.get("privileged"):
        assert context["allowPrivilegeEscalation"] is False
    for namespace in ("hostPID", "hostIPC"):
        if POD.get(namespace):
            assert f"`{namespace}: true` because" in DOC_TEXT, namespace
    assert POD["hostNetwork"] is True and POD["dnsPolicy"] == "ClusterFirstWithHostNet"


def test_runs_on_gpu_nodes_one_pod_per_store() -> None:
    assert POD["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert any(t["key"] == "nvidia.com/gpu" for t in POD["tolerations"])
    update = K8S["DaemonSet"]["spec"]["updateStrategy"]
    assert update.get("rollingUpdate", {}).get("maxSurge", 0) in (0, "0", "0%")


def test_resources_respect_the_overhead_target() -> None:
    requests, limits = CONTAINER["resources"]["requests"], CONTAINER["resources"]["limits"]
    assert CPU_TARGET_CORES <= quantity(requests["cpu"]) <= 0.1
    assert quantity(requests["cpu"]) <= quantity(limits["cpu"]) <= 1.0
    assert RSS_TARGET_BYTES <= quantity(requests["memory"]) <= quantity(limits["memory"]) <= 2**30
    assert quantity(limits["memory"]) >= 2 * START_PEAK_BYTES
    assert quantity(unit_value("MemoryMax").replace("M", "Mi")) == quantity(limits["memory"])
    assert float(unit_value("CPUQuota").rstrip("%")) / 100 == quantity(limits["cpu"])


def test_a_stop_leaves_time_to_flush() -> None:
    flush_s = max(pod_config().store.flush_interval_s, load_toml("host.toml").store.flush_interval_s)
    assert POD["terminationGracePeriodSeconds"] >= max(MIN_STOP_S, 5 * flush_s)
    assert unit_value("KillSignal") == "SIGTERM" and instruction("STOPSIGNAL") == ["SIGTERM"]
    assert float(unit_value("TimeoutStopSec").removesuffix("s")) >= max(MIN_STOP_S, 5 * flush_s)


def test_the_unit_keeps_the_store_state_and_capabilities_the_collectors_need() -> None:
    config = load_toml("host.toml")
    assert str(PurePosixPath(config.store.path).parent) == f"/var/lib/{unit_value('StateDirectory')}"
    assert unit_value("RuntimeDirectory") == "aiops" and unit_value("RuntimeDirectoryPreserve") == "yes"
    assert unit_value("ProtectSystem") == "strict" and str(BPFFS) in unit_value("ReadWritePaths").split()
    assert unit_value("Restart") == "on-failure" and unit_value("LimitMEMLOCK") == "infinity"
    bounding = set(unit_value("CapabilityBoundingSet").split())
    assert bounding == {f"CAP_{c}" for c in required_capabilities(config)}
    assert set(unit_value("AmbientCapabilities").split()) == bounding
    # Each of these would hide what a collector or bcc reads (the unit says which, and why).
    for setting in (
        "PrivateDevices",
        "ProtectKernelTunables",
        "ProtectKernelLogs",
        "ProtectKernelModules",
        "ProtectClock",
        "MemoryDenyWriteExecute",
        "DevicePolicy",
        "PrivateNetwork",
        "SystemCallFilter",
        "InaccessiblePaths",
    ):
        assert not unit_values(setting), f"{setting}= breaks a collector"


def test_every_line_of_the_unit_is_explained() -> None:
    unexplained = [u.key for u in UNIT if not u.comment]
    assert not unexplained, f"settings without a comment above them: {unexplained}"


def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    analyze, true = shutil.which("systemd-analyze"), shutil.which("true")
    if not analyze or not true:
        pytest.skip("systemd-analyze is not installed")
    text = (DEPLOY / "aiops.service").read_text()
    exec_start = unit_value("ExecStart")
    unit = tmp_path / "aiops.service"  # the entry point is not installed here: verify with /bin/true
    unit.write_text(
        text.replace(f"ExecStart={exec_start}", f"ExecStart={true} {exec_start.split(' ', 1)[1]}")
    )
    done = subprocess.run(
        [analyze, "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=60
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0 and not re.search(r"Unknown|Invalid|Failed|ignoring", output), output


def test_the_image_installs_debian_bcc_and_the_whole_package() -> None:
    (base,) = instruction("FROM")
    assert re.search(r"debian:(bookworm|12)", base), base
    installs = " ".join(args for args in instruction("RUN") if "apt-get install" in args).split()
    wanted = {"python3", "python3-venv", "python3-bpfcc", "bpfcc-tools", "python3-pyroute2", "iproute2"}
    wanted |= {"chromium"}  # PDF reports (aiops/report/pdf.py finds /usr/bin/chromium)
    assert wanted <= set(installs), wanted - set(installs)
    assert not any(p.startswith("linux-headers") for p in installs), "headers come from the host"
    runs = " ".join(instruction("RUN"))
    assert "--system-site-packages" in runs and re.search(r"pip install [^&]*/src", runs)
    pdf_extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"][
        "pdf"
    ]
    assert re.search(r"pip install [^&]*\"/src\[pdf\]\"", runs) and any(
        d.startswith("playwright") for d in pdf_extra
    )
    assert instruction("USER") in ([], ["root"])
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]}
    copied = {PurePosixPath(src).name for args in instruction("COPY") for src in shlex.split(args)[:-1]}
    assert packages | {"pyproject.toml", pyproject["project"]["readme"]} <= copied


def test_the_docs_say_what_has_run_where() -> None:
    section = DOC_TEXT.split("## What has run where", 1)[1]
    assert "Not run anywhere" in section and "Nothing here has run on a GPU node" in section
