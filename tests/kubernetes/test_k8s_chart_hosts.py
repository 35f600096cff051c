"""The chart in a real cluster's shape (issue 38 item 2): hosts named as they are, Kubernetes attribution wired
with the least RBAC, the fleet out of the privileged namespace, values checked by the chart's schema.

- The node agent's name: the rendered DaemonSet's command line, with `$(NODE_NAME)` expanded as the kubelet
  expands it from the downward API's `spec.nodeName`, is parsed by the real `aiops` parser, with the rendered
  ConfigMap as its config file: the node gets the name the product's rule gives the Kubernetes node (no
  node.hosts), its rack the node label the values name, read from an API server on 127.0.0.1 (the real Node
  and PodList JSON, the official client) that grants only what the rendered ClusterRole grants.
- Pod Security: the fleet's pod passes the `restricted` profile's checks, the node agents' namespace is the only
  `privileged` one (kubernetes.io/docs/concepts/security/pod-security-standards: the checks below are its rows).
- values.schema.json: a wrong value stops `helm template` naming the value.
"""

from __future__ import annotations

import argparse
import re
import shlex
import uuid
from pathlib import Path
from typing import Any

import pytest

from aiops.cli.main import build_parser
from aiops.cli.run import configured
from aiops.config import Config, load_config_file, this_host_name
from aiops.service.sources import config_resolvers, host_sources, kube_node_name, register_topology
from aiops.store import Store
from tests.k8s_helpers import NAMESPACE, NODE_NAMESPACE, one, render, render_notes, rule_groups
from tests.workload_helpers import api_server, node_json, pod_json

K8S_NODE = "gpu-a100-017.dc1.example"  # a Kubernetes node's name (spec.nodeName): lowercase, dotted
LABELS = {"topology.kubernetes.io/zone": "hall-b-07", "topology.kubernetes.io/region": "dc1"}


def pod_spec(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return dict(one(objects, kind)["spec"]["template"]["spec"])


def kubelet_argv(container: dict[str, Any], env: dict[str, str]) -> list[str]:
    """The container's command and args with `$(VAR)` expanded as the kubelet does (an undefined one stays)."""

    def expand(arg: str) -> str:
        return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), arg)

    return [expand(a) for a in [*container["command"], *container.get("args", [])]]


def downward_env(container: dict[str, Any], node_name: str) -> dict[str, str]:
    """The container's env as the kubelet sets it on node `node_name` (values and spec.nodeName fieldRefs)."""
    out = {}
    for var in container["env"]:
        if "value" in var:
            out[var["name"]] = var["value"]
        elif var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName":
            out[var["name"]] = node_name
    return out


def agent_config(objects: list[dict[str, Any]], tmp_path: Path, node_name: str) -> Config:
    """What `aiops run` in the rendered DaemonSet's pod on `node_name` runs with: its argv (expanded) through
    the real parser, the ConfigMap mounted at the --config path (here a file in tmp_path)."""
    spec = pod_spec(objects, "DaemonSet")
    agent = spec["containers"][0]
    argv = kubelet_argv(agent, downward_env(agent, node_name))
    config_path = argv[argv.index("--config") + 1]
    mount = next(m for m in agent["volumeMounts"] if config_path.startswith(m["mountPath"] + "/"))
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    configmap = one(objects, "ConfigMap", volume["configMap"]["name"])
    local = tmp_path / "config.toml"
    local.write_text(configmap["data"][Path(config_path).name])
    argv[argv.index("--config") + 1] = str(local)
    assert argv[0] == "aiops"
    return configured(build_parser().parse_args(argv[1:]))


def test_the_node_agent_names_its_host_as_the_host_is_named(tmp_path: Path) -> None:
    """Issue 38's must-show: no node.hosts, attribution on; the agent on Kubernetes node
    gpu-a100-017.dc1.example is `gpu-a100-017` (the product's rule), stands in the rack its zone label names,
    and asks the API about its node and its pods by the node's own name, with only the rendered RBAC."""
    objects = render({"node": {"rackLabel": "topology.kubernetes.io/zone"}})
    spec = pod_spec(objects, "DaemonSet")
    assert spec["automountServiceAccountToken"] is True  # the in-cluster account, for attribution
    config = agent_config(objects, tmp_path, K8S_NODE)
    assert (config.node.name, config.node.hosts) == ("gpu-a100-017", {})
    assert kube_node_name(config) == K8S_NODE
    assert config.collectors.workloads.kubernetes and config.collectors.workloads.pod_resources_socket

    role = one(objects, "ClusterRole")
    binding = one(objects, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": spec["serviceAccountName"], "namespace": NODE_NAMESPACE}
    ]
    uid, container_id = str(uuid.uuid4()), uuid.uuid4().hex * 2
    trainer = pod_json("team-a", "llm-0", uid, K8S_NODE, "trainer", container_id, ("Job", "llm"))
    other = pod_json("team-b", "x-0", str(uuid.uuid4()), "other-node", "x", uuid.uuid4().hex * 2, None)
    with api_server([trainer, other], [node_json(K8S_NODE, LABELS)], rbac=role["rules"]) as api:
        # the pod's paths moved under tmp_path, the in-cluster API (not reachable here) at 127.0.0.1
        collectors = config.collectors.model_copy(
            update={
                "root": str(tmp_path),
                "nvml": config.collectors.nvml.model_copy(update={"enabled": False}),
                "kmsg": config.collectors.kmsg.model_copy(update={"enabled": False}),
                "workloads": config.collectors.workloads.model_copy(update={"kube_api": api.url}),
            }
        )
        here = config.model_copy(update={"collectors": collectors})
        sources = host_sources(here)
        store = Store(str(tmp_path / "node.duckdb"))
        try:
            register_topology(store, sources)
            placed = store.query("SELECT node, rack, zone, source FROM node_placement")
            assert placed == [
                {"node": "gpu-a100-017", "rack": "hall-b-07", "zone": "hall-b-07", "source": "kubernetes"}
            ]
            assert store.query("SELECT rack FROM topology WHERE component = 'gpu-a100-017'") == [
                {"rack": "hall-b-07"}
            ]
        finally:
            sources.close()
            store.close()
        resolver = next(r for r in config_resolvers(here, kube_node_name(here)) if r.name == "kubernetes")
        cgroup = (
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
            f"{uid.replace('-', '_')}.slice/cri-containerd-{container_id}.scope"
        )
        found = resolver.resolve(4242, cgroup, {"RANK": "3"})
        assert getattr(resolver, "errors", None) == []  # nothing the RBAC refused
    assert found is not None and (found.namespace, found.pod, found.job) == (
        "team-a",
        "llm-0",
        "k8s-team-a_llm",  # k8s-<namespace>_<owner> (issue 36: names that cannot collide)
    )
    assert f"/api/v1/nodes/{K8S_NODE}" in api.requests
    assert any(f"spec.nodeName%3D{K8S_NODE}" in r or f"spec.nodeName={K8S_NODE}" in r for r in api.requests)


@pytest.mark.parametrize("fqdn", [False, True])
def test_a_host_the_map_places_keeps_the_rules_name_and_a_renamed_one_is_reached_by_its_node(
    tmp_path: Path, fqdn: bool
) -> None:
    hosts = {"gpu-b.dc1.example": {"rack": "b07"}, "old-box.dc1.example": {"name": "gpu-legacy-1"}}
    objects = render({"node": {"hosts": hosts, "fqdn": fqdn}})
    placed = agent_config(objects, tmp_path, "gpu-b.dc1.example")
    assert (placed.node.name, placed.node.rack) == (this_host_name("gpu-b.dc1.example", fqdn), "b07")
    renamed = agent_config(objects, tmp_path, "old-box.dc1.example")
    assert (renamed.node.name, renamed.node.rack) == ("gpu-legacy-1", "rack0")
    stranger = agent_config(objects, tmp_path, "gpu-c.dc1.example")  # not in the map: the rule alone
    assert stranger.node.name == this_host_name("gpu-c.dc1.example", fqdn)
    path = tmp_path / "fleet.toml"
    path.write_text(one(objects, "ConfigMap", "aiops-fleet")["data"]["config.toml"])
    fleet = load_config_file(path)
    assert fleet.fleet.nodes == {"gpu-legacy-1": "http://old-box.dc1.example:9484"}
    assert fleet.fleet.node_url == "http://{host}:9484"


def test_the_rbac_is_read_only_and_only_what_attribution_reads() -> None:
    objects = render()
    role = one(objects, "ClusterRole")
    grants = sorted(
        (g, r, v)
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    )
    assert grants == [("", "nodes", "get"), ("", "pods", "list")]
    assert not [o for o in objects if o["kind"] in ("Role", "RoleBinding")]
    fleet = pod_spec(objects, "Deployment")
    assert fleet["automountServiceAccountToken"] is False  # the fleet calls no Kubernetes API
    off = render({"node": {"kubernetes": {"attribution": False}}})
    assert not [o for o in off if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    spec = pod_spec(off, "DaemonSet")
    assert spec["automountServiceAccountToken"] is False
    assert "pod-resources" not in [v["name"] for v in spec["volumes"]]
    mount = next(
        m
        for m in pod_spec(objects, "DaemonSet")["containers"][0]["volumeMounts"]
        if m["name"] == "pod-resources"
    )
    assert mount["readOnly"] is True and mount["mountPath"] == "/var/lib/kubelet/pod-resources"


# -- Pod Security Standards (v1.31 page, "Baseline" and "Restricted" tables) ----------------------------------
BASELINE_CAPS = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
    "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip
RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret",
}  # fmt: skip


def restricted_violations(spec: dict[str, Any]) -> list[str]:
    """Where a pod spec breaks the Baseline or Restricted profile (what admission at `restricted` refuses)."""
    out = [f"{k}: true" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    pod_ctx = spec.get("securityContext", {})
    for volume in spec.get("volumes", []):
        kind = next(k for k in volume if k != "name")
        if kind not in RESTRICTED_VOLUMES:
            out.append(f"volume {volume['name']}: {kind}")
    for c in spec["containers"] + spec.get("initContainers", []):
        ctx = c.get("securityContext", {})
        caps = ctx.get("capabilities", {})
        if ctx.get("privileged"):
            out.append(f"{c['name']}: privileged")
        if any(p.get("hostPort") for p in c.get("ports", [])):
            out.append(f"{c['name']}: hostPort")
        if set(caps.get("add", [])) - BASELINE_CAPS or set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            out.append(f"{c['name']}: adds {caps.get('add')}")
        if "ALL" not in caps.get("drop", []):
            out.append(f"{c['name']}: does not drop ALL")
        if ctx.get("allowPrivilegeEscalation") is not False:
            out.append(f"{c['name']}: allowPrivilegeEscalation not false")
        if not ctx.get("runAsNonRoot", pod_ctx.get("runAsNonRoot")):
            out.append(f"{c['name']}: runAsNonRoot not true")
        if ctx.get("runAsUser", pod_ctx.get("runAsUser")) == 0:
            out.append(f"{c['name']}: runAsUser 0")
        seccomp = ctx.get("seccompProfile", pod_ctx.get("seccompProfile", {})).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{c['name']}: seccompProfile {seccomp}")
    return out


@pytest.mark.parametrize("mcp", [False, True])
def test_the_fleet_is_restricted_and_only_the_node_agents_namespace_is_privileged(mcp: bool) -> None:
    values: dict[str, Any] = {"namespace": {"create": True}}
    if mcp:
        values["mcp"] = {"enabled": True, "token": {"existingSecret": "aiops-mcp", "key": "token"}}
    objects = render(values)
    fleet = one(objects, "Deployment")
    assert restricted_violations(fleet["spec"]["template"]["spec"]) == []
    node = one(objects, "DaemonSet")
    assert restricted_violations(node["spec"]["template"]["spec"])  # the check can fail: the agents need more
    assert (fleet["metadata"]["namespace"], node["metadata"]["namespace"]) == (NAMESPACE, NODE_NAMESPACE)
    levels = {
        o["metadata"]["name"]: o["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
        for o in objects
        if o["kind"] == "Namespace"
    }
    assert levels == {NAMESPACE: "restricted", NODE_NAMESPACE: "privileged"}
    # everything of the node agents lives in their namespace; nothing of the fleet does
    for o in objects:
        namespace = o["metadata"].get("namespace")
        if namespace is None:
            continue
        component = o["metadata"].get("labels", {}).get("app.kubernetes.io/component")
        assert namespace == (NODE_NAMESPACE if component == "node" else NAMESPACE), (
            o["kind"],
            o["metadata"]["name"],
        )


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"node": {"maxUnavailable": 0}}, "/node/maxUnavailable"),  # with maxSurge 0 no update could start
        ({"image": {"tag": 0.1}}, "/image/tag"),  # --set image.tag=0.10 is the number 0.1
        ({"image": {"digest": "latest"}}, "/image/digest"),
        ({"http": {"token": "in-git"}}, "additional properties 'token' not allowed"),  # the old value, gone
        ({"node": {"hosts": {"gpu-a": {"rack": "Rack_A"}}}}, "/node/hosts/gpu-a/rack"),
        ({"node": {"rackLabel": "rack label"}}, "/node/rackLabel"),
        (
            {"monitoring": {"prometheusRule": {"staleFor": "5 minutes"}}},
            "/monitoring/prometheusRule/staleFor",
        ),
        ({"ingress": {"enabled": "yes"}}, "/ingress/enabled"),
    ],
)
def test_a_wrong_value_stops_the_render_naming_the_value(values: dict[str, Any], named: str) -> None:
    with pytest.raises(Exception, match=re.escape(named)):
        render(values)


PROSE = {"node", "fleet", "agent", "agents", "opened"}  # "the aiops node agent", "aiops opened": prose


def aiops_commands(text: str) -> list[list[str]]:
    """Every `aiops ...` command line in `text`, written as a person runs it in a pod (`... -- aiops ...`)."""
    found = re.findall(r"-- (aiops(?: (?:--?)?[\w/.<>=:-]+)*)", text)
    return [shlex.split(c.rstrip(".")) for c in found]


def command_exists(words: list[str]) -> bool:
    """Whether `aiops <words...>` reaches a command of the real parser (its subcommands, options aside)."""
    parser = build_parser()
    for word in words:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            return True  # a command: what follows are its arguments
        if word not in subs[0].choices:
            return False
        parser = subs[0].choices[word]
    return not [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]


def test_the_notes_and_the_alerts_name_commands_that_exist() -> None:
    """Every command the install notes and the alert annotations tell on-call to run exists: those written to
    be run in a pod (`kubectl ... -- aiops ...`) are parsed whole by the real `aiops` parser, any other
    mention reaches a command (`aiops incidents show ID` and `aiops query` do not exist)."""
    values = {"ingress": {"enabled": True, "host": "aiops.example.com", "tls": {"secretName": "t"}}}
    texts = [render_notes(), render_notes(values)]
    for objects in (render(), render(values), render({"fleet": {"enabled": False}})):
        annotations = [r.get("annotations", {}) for g in rule_groups(objects)["groups"] for r in g["rules"]]
        texts += [v for a in annotations for v in a.values()]
    for text in texts:  # -n aiops: a namespace
        for named in re.finditer(r"(?<!-- )(?<!-n )\baiops((?: [a-z][a-z-]*)+)", text):
            words = named.group(1).split()
            assert words[0] in PROSE or command_exists(words), (
                f"`aiops {' '.join(words)}` is no command: {text}"
            )
    commands = [c for t in texts for c in aiops_commands(t)]
    assert len(commands) >= 6 and {tuple(c[:3]) for c in commands} >= {("aiops", "actions", "list")}
    parser = build_parser()
    for argv in commands:
        try:
            parser.parse_args(argv[1:])
        except SystemExit:
            pytest.fail(f"not an aiops command: {' '.join(argv)}")
    assert "https://aiops.example.com/incidents/{{ $labels.incident_id }}" in " ".join(texts)


def test_the_ingress_policy_budget_and_image_values_reach_their_objects(tmp_path: Path) -> None:
    digest = "sha256:" + "cd" * 32
    values: dict[str, Any] = {
        "image": {"digest": digest},
        "imagePullSecrets": ["regcred"],
        "ingress": {"enabled": True, "host": "aiops.example.com", "tls": {"secretName": "aiops-tls"}},
        "console": {"enabled": True, "secureCookies": True},
        "networkPolicy": {"from": [{"namespaceSelector": {"matchLabels": {"team": "sre"}}}]},
        "node": {
            "capabilities": ["BPF", "PERFMON"],
            "maxUnavailable": "25%",
            "priorityClassName": "critical",
        },
        "mcp": {"enabled": True, "token": {"existingSecret": "aiops-mcp", "key": "token"}},
    }
    objects = render(values)
    fleet, node = pod_spec(objects, "Deployment"), pod_spec(objects, "DaemonSet")
    for spec in (fleet, node):
        assert spec["imagePullSecrets"] == [{"name": "regcred"}]
        assert all(c["image"].endswith("@" + digest) for c in spec["containers"])
    agent = node["containers"][0]
    assert agent["securityContext"]["capabilities"]["add"] == ["BPF", "PERFMON"]
    assert node["priorityClassName"] == "critical"
    assert one(objects, "DaemonSet")["spec"]["updateStrategy"]["rollingUpdate"] == {
        "maxSurge": 0,
        "maxUnavailable": "25%",
    }
    labels = one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    service = one(objects, "Service", "aiops-fleet")
    ingress = one(objects, "Ingress")["spec"]
    backend = ingress["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend["name"] == service["metadata"]["name"]
    assert backend["port"]["name"] in {p["name"] for p in service["spec"]["ports"]}
    assert ingress["tls"] == [{"hosts": ["aiops.example.com"], "secretName": "aiops-tls"}]
    path = tmp_path / "config.toml"
    path.write_text(one(objects, "ConfigMap", "aiops-fleet")["data"]["config.toml"])
    config = load_config_file(path)
    assert "aiops.example.com" in config.http.allowed_hosts  # else the fleet answers the ingress 421
    assert config.console_url == "https://aiops.example.com"  # notifications link to its incident pages
    policy = one(objects, "NetworkPolicy")["spec"]
    assert policy["podSelector"]["matchLabels"].items() <= labels.items()
    ports = {p["name"] for c in fleet["containers"] for p in c.get("ports", [])}
    assert {p["port"] for p in policy["ingress"][0]["ports"]} == ports == {"http", "mcp"}
    assert policy["ingress"][0]["from"] == values["networkPolicy"]["from"]
    budget = one(objects, "PodDisruptionBudget")["spec"]
    assert budget["selector"]["matchLabels"].items() <= labels.items() and budget["maxUnavailable"] == 1
