"""The Helm chart's integrations of the fleet (docs/KUBERNETES.md, "Integrations"): notifications with
PagerDuty and Teams secrets, the Slack app, the console with single sign-on, and `aiops mcp` beside the fleet.

The values are the documented example itself. What is checked: every object passes `kubernetes-validate
--strict`; the fleet's config.toml passes the real loader (as `aiops config check` does: secret files are not
opened, and they are absent here), each file it names is a read-only mounted key of the Secret the values name,
and the checks the fleet makes at start run on it; the mcp container's command line is parsed by the real
`aiops` parser. With the values off (the defaults) nothing of theirs is rendered.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from aiops.cli.main import build_parser
from aiops.config import Config, load_config_file, parse_listen
from aiops.config_chatops import check_users
from aiops.errors import ConfigError
from aiops.integrations.notifier import Notifier
from aiops.store import Workspace
from tests.k8s_helpers import K8S_VERSIONS, assert_valid_strict, one, render

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "KUBERNETES.md").read_text()
SECTION = DOC.split("## Integrations\n", 1)[1].split("\n## ", 1)[0]
VALUES: dict[str, Any] = yaml.safe_load(SECTION.split("```yaml\n", 1)[1].split("```", 1)[0])


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    return render(VALUES)


def pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return dict(one(objects, "Deployment", "aiops-fleet")["spec"]["template"]["spec"])


def fleet_config(objects: list[dict[str, Any]], tmp_path: Path) -> Config:
    """The fleet's config.toml through the real loader, from a file as the pod reads it."""
    path = tmp_path / "config.toml"
    path.write_text(one(objects, "ConfigMap", "aiops-fleet")["data"]["config.toml"])
    return load_config_file(path)


def mounted_key(pod_spec: dict[str, Any], container: str, file: str) -> tuple[str, str, int]:
    """(Secret, key, mode) of the file `file` in `container`: its read-only mount and the volume's item."""
    c = next(c for c in pod_spec["containers"] if c["name"] == container)
    where = PurePosixPath(file)
    mount = next(m for m in c["volumeMounts"] if m["mountPath"] == str(where.parent))
    assert mount.get("readOnly") is True, mount
    volume = next(v for v in pod_spec["volumes"] if v["name"] == mount["name"])
    if "projected" in volume:
        mode = volume["projected"]["defaultMode"]
        sources = [s["secret"] for s in volume["projected"]["sources"]]
    else:
        mode, sources = volume["secret"]["defaultMode"], [volume["secret"]]
    found = [
        (s.get("name") or s.get("secretName"), i["key"])
        for s in sources
        for i in s["items"]
        if i["path"] == where.name
    ]
    assert len(found) == 1, (file, sources)
    return found[0][0], found[0][1], mode


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_the_integrations_pass_kubernetes_validate_strict(
    objects: list[dict[str, Any]], version: str, tmp_path: Path
) -> None:
    assert_valid_strict(objects, version, tmp_path)


def test_the_fleet_config_is_accepted_and_names_mounted_secret_keys(
    objects: list[dict[str, Any]], tmp_path: Path
) -> None:
    config = fleet_config(objects, tmp_path)
    spec = pod(objects)
    hooks, slack, oidc = config.notify.webhooks, config.chatops.slack, config.console.oidc
    assert [h.kind for h in hooks] == [h["kind"] for h in VALUES["notify"]["webhooks"]]
    assert hooks[2].url == VALUES["notify"]["webhooks"][2]["url"]  # no secret: inline
    assert config.console.enabled and oidc.enabled and slack.enabled
    assert (
        oidc.role_map == VALUES["console"]["oidc"]["roleMap"]
        and slack.users == VALUES["chatops"]["slack"]["users"]
    )
    assert config.http.allowed_hosts == VALUES["fleet"]["allowedHosts"]
    assert urlsplit_host(oidc.redirect_base_url) in config.http.allowed_hosts  # else 421 on the callback
    expected = {  # file -> the {existingSecret, key} the values name
        hooks[0].routing_key_file: VALUES["notify"]["webhooks"][0]["routingKey"],
        hooks[1].url_file: VALUES["notify"]["webhooks"][1]["urlSecret"],
        slack.signing_secret_file: VALUES["chatops"]["slack"]["signingSecret"],
        slack.bot_token_file: VALUES["chatops"]["slack"]["botToken"],
        oidc.client_secret_file: VALUES["console"]["oidc"]["clientSecret"],
        config.notify.ticket.token_file: VALUES["notify"]["ticket"]["token"],
    }
    assert config.notify.ticket.kind == "jira" and config.notify.ticket.project == "OPS"
    for file, ref in expected.items():
        assert mounted_key(spec, "fleet", file) == (ref["existingSecret"], ref["key"], 0o400), file
    # What the fleet checks when it starts: every Slack principal is an approver (else exit 2) ...
    check_users(slack, config.guardrails.approvers, config.source)
    # ... and reads the secret files: here they are absent, and the refusal names the file and the key.
    with pytest.raises(ConfigError) as caught:
        Notifier(config.notify)
    assert f"{hooks[0].routing_key_file}: field 'notify.webhooks[0].routing_key_file'" in str(caught.value)


def urlsplit_host(url: str) -> str:
    match = re.match(r"^https?://([^/:]+)", url)
    assert match, url
    return match.group(1)


def test_the_mcp_container_is_the_real_command_on_its_mounts(objects: list[dict[str, Any]]) -> None:
    spec = pod(objects)
    assert spec["shareProcessNamespace"] is True  # the server finds the fleet by its PID
    (mcp,) = [c for c in spec["containers"] if c["name"] == "mcp"]
    assert mcp["command"][:2] == ["sh", "-c"] and 'exec aiops "$@"' in mcp["command"][2]
    args = build_parser().parse_args(mcp["args"])
    assert args.command == "mcp" and args.transport == "http" and args.config == "/etc/aiops/config.toml"
    port = parse_listen(args.listen)[1]
    assert port == VALUES.get("mcp", {}).get("port", 8765) == mcp["ports"][0]["containerPort"]
    ref = VALUES["mcp"]["token"]
    assert mounted_key(spec, "mcp", args.token_file) == (ref["existingSecret"], ref["key"], 0o400)
    (root,) = args.files_root
    files = next(m for m in mcp["volumeMounts"] if m["mountPath"] == root)
    claim = next(v for v in spec["volumes"] if v["name"] == files["name"])["persistentVolumeClaim"]
    assert files["readOnly"] and claim == {"claimName": VALUES["mcp"]["filesClaim"], "readOnly": True}
    env = {e["name"]: e["value"] for e in mcp["env"]}
    store = next(m for m in mcp["volumeMounts"] if m["name"] == "store")
    assert PurePosixPath(env["AIOPS_MCP_DB"]).parent == PurePosixPath(store["mountPath"])
    service = one(objects, "Service", "aiops-mcp")
    assert service["spec"]["ports"][0]["targetPort"] == mcp["ports"][0]["name"]
    labels = one(objects, "Deployment", "aiops-fleet")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert "aiops-mcp.aiops.svc" in args.allowed_host  # the name clients in the cluster use (else 421)
    monitor = one(objects, "ServiceMonitor")["spec"]["selector"]["matchLabels"]
    assert not monitor.items() <= service["metadata"]["labels"].items()  # not scraped as the fleet


def status_of(url: str, host: str, token: str | None) -> int:
    request = urllib.request.Request(
        url, headers={"Host": host, "Accept": "application/json, text/event-stream"}
    )
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return error.code


def test_the_mcp_container_command_waits_for_the_workspace_then_serves(
    objects: list[dict[str, Any]], tmp_path: Path
) -> None:
    """The container's own command and arguments, run here with the pod's paths under tmp_path and the listen
    address on 127.0.0.1: it waits for the fleet's workspace, then serves with the mounted token and the
    Service's names."""
    (mcp,) = [c for c in pod(objects)["containers"] if c["name"] == "mcp"]
    pod_db = {e["name"]: e["value"] for e in mcp["env"]}["AIOPS_MCP_DB"]
    config = tmp_path / "config.toml"
    text = one(objects, "ConfigMap", "aiops-fleet")["data"]["config.toml"]
    db = tmp_path / "fleet.duckdb"
    config.write_text(text.replace(f'"{pod_db}"', f'"{db}"'))
    token = "t0ken-" + "x" * 32
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    files = tmp_path / "files"
    files.mkdir()
    pod_paths = {"/etc/aiops/config.toml": str(config), "/srv/aiops-files": str(files)}
    pod_paths[build_parser().parse_args(mcp["args"]).token_file] = str(token_file)
    args = [pod_paths.get(a, a) for a in mcp["args"]]
    args = [re.sub(r"^0\.0\.0\.0:\d+$", "127.0.0.1:0", a) for a in args]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIOPS_", "OPENAI_"))}
    env.update(AIOPS_MCP_DB=str(db), HOME=str(tmp_path), PATH=f"{Path(sys.executable).parent}:{env['PATH']}")
    log = tmp_path / "mcp.log"
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [*mcp["command"], *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env
        )
    try:
        time.sleep(0.5)
        assert proc.poll() is None and "serving" not in log.read_text()  # waiting for the workspace
        made = tmp_path / "made" / "fleet.duckdb"
        with Workspace(str(made)).write():
            pass
        made.rename(db)
        deadline, url = time.monotonic() + 60, ""
        while not url:
            out = log.read_text()
            url = next((w for w in out.split() if w.startswith("http://127.0.0.1:")), "")
            assert proc.poll() is None, f"exited {proc.returncode}: {out}"
            assert time.monotonic() < deadline, out
            time.sleep(0.05)
        # (On loopback the SDK admits only local Host names; the pod listens on 0.0.0.0, where the Service's
        # names passed as --allowed-host are what the server admits.)
        local = url.split("/")[2]
        assert status_of(url, local, None) == 401  # the mounted token is required
        assert status_of(url, local, "not-" + token) == 401
        answered = status_of(url, local, token)
        assert answered not in (401, 421) and answered < 500, answered
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            assert proc.wait(timeout=20) == 0, log.read_text()
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            raise


def test_with_the_values_off_nothing_of_theirs_is_rendered(tmp_path: Path) -> None:
    objects = render()
    names = sorted((o["kind"], o["metadata"]["name"]) for o in objects)
    assert names == sorted(
        [
            (
                "ClusterRole",
                "aiops:aiops:node",
            ),  # Kubernetes attribution (tests/kubernetes/test_k8s_chart_hosts.py)
            ("ClusterRoleBinding", "aiops:aiops:node"),
            ("ConfigMap", "aiops-alertmanager-inhibit"),  # the alerts' inhibition rules (monitoring)
            ("ConfigMap", "aiops-fleet"),
            ("ConfigMap", "aiops-node"),
            ("DaemonSet", "aiops-node"),
            ("Deployment", "aiops-fleet"),
            ("Namespace", "aiops-node"),  # the node agents' privileged namespace
            ("NetworkPolicy", "aiops-fleet"),
            ("PersistentVolumeClaim", "aiops-fleet"),
            ("PodDisruptionBudget", "aiops-fleet"),
            ("PodMonitor", "aiops-node"),
            ("PrometheusRule", "aiops"),
            ("Service", "aiops-fleet"),
            ("ServiceAccount", "aiops-fleet"),
            ("ServiceAccount", "aiops-node"),
            ("ServiceMonitor", "aiops-fleet"),
        ]
    )
    spec = pod(objects)
    assert [c["name"] for c in spec["containers"]] == ["fleet"] and "shareProcessNamespace" not in spec
    assert [v["name"] for v in spec["volumes"]] == ["config", "http-token", "store", "tmp", "shm"]
    text = one(objects, "ConfigMap", "aiops-fleet")["data"]["config.toml"]
    tables = re.findall(r"^\[+([a-z_.]+)\]+", text, flags=re.M)
    assert tables == ["store", "http", "fleet", "report"]
    config = fleet_config(objects, tmp_path)
    assert config.notify == Config().notify and config.chatops == Config().chatops
    assert config.console == Config().console and config.http.allowed_hosts == []


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"notify": {"webhooks": [{"kind": "pagerduty"}]}},
            "notify.webhooks[0].routingKey: give existingSecret",
        ),
        ({"notify": {"webhooks": [{"kind": "teams"}]}}, "notify.webhooks[0]: give url, or urlSecret"),
        (
            {"notify": {"webhooks": [{"kind": "email", "url": "https://x"}]}},
            "at '/notify/webhooks/0/kind'",  # values.schema.json, before any template
        ),
        (
            {
                "notify": {
                    "webhooks": [{"kind": "teams", "url": "https://x", "urlSecret": {"existingSecret": "t"}}]
                }
            },
            "give url or urlSecret, not both",
        ),
        ({"console": {"oidc": {"issuer": "https://sso.example.com"}}}, "console.enabled must be true too"),
        (
            {"chatops": {"slack": {"enabled": True, "signingSecret": {"existingSecret": "s"}}}},
            "chatops.slack.botToken: give existingSecret",
        ),
        ({"mcp": {"enabled": True}}, "mcp.token: give existingSecret and key"),
    ],
)
def test_an_incomplete_integration_stops_the_install_naming_the_value(
    values: dict[str, Any], message: str
) -> None:
    with pytest.raises(Exception, match=re.escape(message)):
        render(values)
