"""The aiops configuration file (TOML): one file for the node service (`aiops run`), the chat's LLM and the
guardrails. Every key is validated; an error names the file, the key and the allowed values (exit 2).
`aiops config example` prints a commented file with every default; `aiops config check FILE` validates one.

With no file, the defaults run on this host with what exists: the collectors read the real /sys, /proc and
/dev/kmsg, each one reporting once when what it reads is absent (no GPU driver, no InfiniBand), the store is
`/var/lib/aiops/aiops.duckdb` for root (else under ~/.local/state/aiops), and the HTTP endpoint listens on
127.0.0.1 only. Where the file is: `--config FILE`, else $AIOPS_CONFIG, else ~/.config/aiops/config.toml (a
missing file named by --config or $AIOPS_CONFIG is an error, not a silent default).
"""

from __future__ import annotations

import ipaddress
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from aiops.config_breaker import BreakerConfig
from aiops.config_chatops import ChatopsConfig, SlackConfig
from aiops.config_facility import DcimConfig as DcimConfig  # re-exported: [dcim]
from aiops.config_facility import FacilityConfig as FacilityConfig  # re-exported: [facility]
from aiops.config_facility import FacilitySeries as FacilitySeries
from aiops.config_notify import SeverityConfig as SeverityConfig  # re-exported: [notify.severity]
from aiops.config_notify import TicketConfig as TicketConfig  # re-exported: [notify.ticket]
from aiops.config_notify import WebhookConfig as WebhookConfig  # re-exported: [[notify.webhooks]]
from aiops.config_oidc import OidcConfig
from aiops.cron import parse_cron
from aiops.errors import ConfigError
from aiops.labels import Label, host_name_error, rack_name_error
from aiops.safeload import permission_problem, read_limited

USER_CONFIG_PATH = Path("~/.config/aiops/config.toml")
DEFAULT_LISTEN = "127.0.0.1:9484"
REPORT_FORMATS = ("html", "md", "pdf")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def default_store_path() -> str:
    """Root keeps its state under /var/lib; anyone else under their home."""
    if os.geteuid() == 0:
        return "/var/lib/aiops/aiops.duckdb"
    return str(Path("~/.local/state/aiops/aiops.duckdb").expanduser())


def this_host_name(hostname: str, fqdn: bool = False) -> str:
    """This host's component name from the kernel's host name: lowercased, its first label unless `fqdn`."""
    name = hostname.strip().lower()
    return name if fqdn else name.split(".", 1)[0]


class HostIdentity(_Section):
    name: str
    rack: str = "rack0"

    @field_validator("name")
    @classmethod
    def _node(cls, value: str) -> str:
        error = host_name_error(value)
        if error:
            raise ValueError(error)
        return value

    @field_validator("rack")
    @classmethod
    def _rack(cls, value: str) -> str:
        error = rack_name_error(value)
        if error:
            raise ValueError(error)
        return value


class NodeConfig(HostIdentity):
    name: str = Field(
        default="",
        description="this host's component name (any lowercase RFC 1123 host name); empty: the host's own "
        "name, its first label (node{n} is the twin's)",
    )
    rack: str = Field(default="rack0", description="the rack it stands in (any RFC 1123 label)")
    fqdn: bool = Field(
        default=False, description="with an empty name: the whole host name, not its first label"
    )
    row: str = Field(default="", max_length=63, description="the row of racks it stands in; empty: unknown")
    hosts: dict[str, HostIdentity] = Field(
        default_factory=dict,
        description="hostname -> {name, rack}: one file for every node (a DaemonSet's ConfigMap); an "
        "unlisted host is named after itself, in [node] rack",
    )

    @field_validator("name")
    @classmethod
    def _node(cls, value: str) -> str:
        return HostIdentity._node(value) if value else value


def node_of(config: Config, hostname: str) -> NodeConfig:
    """This host's identity: its entry in `[node.hosts]` by hostname (the kernel's, or lowercased), else
    `[node]`, an empty name meaning the host's own name. A host name that is no valid component name is an
    error naming `[node] name` (set it there)."""
    node = config.node
    found = node.hosts.get(hostname) or node.hosts.get(hostname.lower())
    if found is not None:
        return NodeConfig(name=found.name, rack=found.rack, row=node.row)
    if node.name:
        return node.model_copy(update={"hosts": {}})
    name = this_host_name(hostname, node.fqdn)
    error = host_name_error(name)
    if error:
        raise ConfigError(
            config.source, "node.name", f"this host's name '{name[:80]}' cannot name it: {error}; set it"
        )
    return NodeConfig(name=name, rack=node.rack, fqdn=node.fqdn, row=node.row)


MIN_MEMORY_LIMIT_MB = 16  # `[store] memory_limit_mb`: below this a node's window of rows alone would spill


class StoreConfig(_Section):
    path: str = Field(default_factory=default_store_path, description="the workspace's DuckDB file")
    retention_days: float = Field(default=14.0, gt=0, le=3650, description="time series older than this go")
    flush_interval_s: float = Field(
        default=5.0,
        gt=0,
        le=300,
        description="the collectors' rows are written at least every N seconds (a kill -9 loses at most these)",
    )
    # DuckDB sizes its work by its memory limit, not by the rows at hand: at 256 MB an 8-GPU sim agent's DuckDB
    # allocator held ~3 MB more resident than at 32 for the same rows (~5 more at 24; at 16 it spilled before its
    # first checkpoint), and the blocks it caches grow up to the limit; past it a query spills to `<db>.tmp`
    # (docs/BENCHMARKS.md, "Footprint", round eight)
    memory_limit_mb: int = Field(
        default=0,
        ge=0,
        le=1_048_576,
        description="DuckDB's memory limit in the service; 0: 32 on a node, 256 on the fleet",
    )
    # DuckDB starts one worker per core and keeps what its allocator freed up to 128 MB: on a node of 100+ cores
    # that is the node agent's largest cost, for queries over seconds of one node (docs/BENCHMARKS.md)
    threads: int = Field(
        default=0,
        ge=0,
        le=1024,
        description="DuckDB's worker threads in the service and the commands' workspaces; 0: 1 on a node, every core on the fleet",
    )
    allocator_flush_mb: int = Field(
        default=16, ge=1, le=65_536, description="DuckDB gives freed memory back past this peak of a task"
    )
    # DuckDB holds every row written since its last checkpoint in memory (with its index entries), ~1.9 bytes per
    # byte of write-ahead log: at its default of 16 MB of log an 8-GPU node agent's DuckDB memory climbs from ~11 to
    # ~33 MB over ~47 minutes (its resident set by 24 MB); at 4 MB it stays within 10-20 MB, a checkpoint every
    # ~12 minutes (a checkpoint of 14 MB of rows took 0.07 s of CPU; docs/BENCHMARKS.md, "Footprint", round seven)
    checkpoint_mb: int = Field(
        default=0,
        ge=0,
        le=65_536,
        description="the service checkpoints its workspace past this much write-ahead log; 0: 4 on a node, DuckDB's 16 on the fleet",
    )
    # a detection window that closed in the rows held is written and judged at once, when the last write is at
    # least this old: a window is judged within this of its close, and rows between windows wait up to
    # `flush_interval_s` (docs/SERVICE.md, "The loop"); 0, or not under `flush_interval_s`: every flush_interval_s
    window_flush_s: float = Field(
        default=2.0,
        ge=0,
        le=300,
        description="a closed detection window is written and judged within N seconds",
    )
    # between two windows, the rows not yet written go to `<db>.held` every `flush_interval_s` instead of into
    # the workspace, which is then written once a window, at the latest every 2 x flush_interval_s
    # (aiops/service/held.py); only where `window_flush_s` is on
    hold_rows: bool = Field(
        default=True,
        description="rows between two windows held in <db>.held, the workspace written once a window",
    )

    @field_validator("memory_limit_mb")
    @classmethod
    def _memory_limit(cls, value: int) -> int:
        if 0 < value < MIN_MEMORY_LIMIT_MB:
            raise ValueError(
                f"{value} MB is too little for DuckDB: 0 (the default) or {MIN_MEMORY_LIMIT_MB} or more"
            )
        return value


class CollectorConfig(_Section):
    enabled: bool = True
    interval_s: float = Field(default=1.0, gt=0, le=3600)


def _collector(interval_s: float, enabled: bool = True) -> Any:
    return Field(default_factory=lambda: CollectorConfig(enabled=enabled, interval_s=interval_s))


class WorkloadsConfig(CollectorConfig):
    """Who runs on each GPU (collectors/workloads, docs/JOBS.md): NVML's processes resolved to jobs."""

    interval_s: float = Field(default=5.0, gt=0, le=3600)
    kubernetes: bool = Field(default=True, description="resolve processes in kubepods cgroups to their pods")
    kube_api: str = Field(
        default="", description="API server URL; empty: kubeconfig, else in-cluster account"
    )
    kubeconfig: str = Field(default="", description="a kubeconfig file for the API server; empty: none")
    pod_resources_socket: str = Field(
        default="/var/lib/kubelet/pod-resources/kubelet.sock", description="the kubelet's pod-resources API"
    )
    node_rack_label: str = Field(default="", description="the node label naming its rack; empty: [node] rack")
    node_row_label: str = Field(default="", description="the node label naming its row; empty: [node] row")


class CollectorsConfig(_Section):
    root: str = Field(default="/", description="prefix of /sys, /proc and /dev (a fixture tree in tests)")
    nvml: CollectorConfig = _collector(1.0)
    sysfs: CollectorConfig = _collector(5.0)  # thermal zones, cooling devices, powercap, hwmon
    procfs: CollectorConfig = _collector(1.0)  # /proc/stat, /proc/pressure (PSI)
    net: CollectorConfig = _collector(1.0)  # /sys/class/net statistics and carrier changes
    infiniband: CollectorConfig = _collector(5.0)  # /sys/class/infiniband port and hw counters
    kmsg: CollectorConfig = _collector(1.0)  # /dev/kmsg: Xid, off the bus, AER, GSP, link, thermal, MCE, ...
    lanes: CollectorConfig = _collector(1.0)  # eBPF lane counters and tcp_probe, when lanes are applied
    workloads: WorkloadsConfig = Field(default_factory=WorkloadsConfig)  # GPU -> process -> job (JOBS.md)
    # eBPF uprobes on libnccl/libcudart: one 2 s window per interval (docs/PROFILE.md "Per-rank timing")
    rank_timing: CollectorConfig = _collector(60.0)


class DetectionConfig(_Section):
    window_s: float = Field(default=10.0, ge=1, le=300)
    quiet_s: float = Field(
        default=180.0, ge=10, le=86_400, description="an incident resolves after this quiet"
    )
    replay_s: float = Field(default=1800.0, ge=0, le=86_400, description="history replayed at start")
    recurrence_s: float = Field(
        default=86_400.0,
        ge=0,
        le=30 * 86_400,
        description="a new incident of the same cause on the same component this soon after one resolved is "
        "linked to it as its recurrence (recurrence_of); 0: never",
    )


class SchedulerConfig(_Section):
    """The scheduler that drains, requeues and restarts on this host (guardrails/routing.py routes to it)."""

    kind: Literal["none", "slurm", "kubernetes"] = Field(
        default="none", description="none: scheduler actions stand as tickets"
    )
    binaries: str = Field(default="", description="slurm: the folder of scontrol/sinfo; empty: PATH")
    kubeconfig: str = Field(default="", description="kubernetes: a kubeconfig file; empty: in_cluster")
    in_cluster: bool = Field(default=False, description="kubernetes: the pod's service account")
    node_name: str = Field(default="", description="this host's name in the scheduler; empty: the hostname")
    timeout_s: float = Field(default=10.0, gt=0, le=300, description="one scheduler call at most")


SHARD_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,31}")


class FleetConfig(_Section):
    """`aiops fleet`: where the node agents' exports are read (docs/FLEET.md)."""

    prometheus: str = Field(default="", description="Prometheus or VictoriaMetrics base URL (--prometheus)")
    bearer_token_file: str = Field(default="", description="file holding a bearer token for it; empty: none")
    step_s: float = Field(default=15.0, ge=1, le=600, description="the scrape interval: one row per step")
    lookback_s: float = Field(
        default=600.0, ge=0, le=86_400, description="read at the first start: a fault under way is found"
    )
    delay_s: float = Field(
        default=5.0, ge=0, le=600, description="how far behind now to read (VictoriaMetrics: >= 30)"
    )
    read_after_scrapes: bool = Field(
        default=True,
        description="read each step just after the agents' scrapes (their phase learned from their sample times)",
    )
    phase_s: float = Field(
        default=0.0, ge=0, le=600, description="else: read at multiples of step_s plus this many seconds"
    )
    selector: str = Field(default="", description='extra label matchers for every query, e.g. cluster="a"')
    timeout_s: float = Field(default=30.0, gt=0, le=600, description="one answer's whole time")
    node_url: str = Field(
        default="http://{host}:9484",
        description="a node agent's base URL; {host} is the node's name (approved actions go there)",
    )
    nodes: dict[str, str] = Field(
        default_factory=dict, description="host -> its agent's base URL, where the template does not fit"
    )
    node_token_file: str = Field(default="", description="file holding the node agents' /api bearer token")
    node_token_dir: str = Field(
        default="", description="a folder of one token file per host (<dir>/<host>): each node its own token"
    )
    dispatch_timeout_s: float = Field(default=40.0, gt=0, le=600, description="one dispatch's whole time")
    job_steps: Literal["scheduler", "node_agent"] = Field(
        default="scheduler",
        description="who restarts a job for the fleet: scheduler ([fleet.scheduler]) or node_agent (one node "
        "agent of the job, through its own executors, after checking the signatures itself)",
    )
    # sharding (docs/FLEET.md, "Fleet size: sharding"): this shard's name goes into its incident ids
    # (INC-fleet-<shard>-0001: unique across shards), and `aiops fleet-view` reads every shard's /api
    shard: str = Field(default="", description="this fleet's shard name (a-z, 0-9, -); empty: not sharded")
    shards: dict[str, str] = Field(
        default_factory=dict,
        description="shard name -> its fleet's base URL, for `aiops fleet-view`; on a shard, the others it asks "
        "so that a condition they all see pages once",
    )
    shards_token_file: str = Field(default="", description="file holding the shards' /api bearer token")
    # the cluster's scheduler as the fleet reaches it: job steps (restart_job of job:slurm-<id> or a Kubernetes
    # job) run through it from the fleet, and its drained/cordoned nodes count for the breaker (docs/FLEET.md)
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    rank_reads: int = Field(
        default=15,
        ge=1,
        le=15,
        description="per-rank timing read on a grid this many times finer than the step, each rank's rows judged "
        "as its node's scrape lands (agents scraped at their own phases: docs/FLEET.md); between steps only "
        "where an agent's scrape landed; 1: once a step with the rest",
    )
    blind_after_s: float = Field(
        default=0.0,
        ge=0,
        le=3600,
        description="blind (not ready, a source_blind incident) after this long without data or this far "
        "behind; 0: two scrape intervals, at least 10 s (raise it where the fleet's host is known to fall behind)",
    )
    targets_url: str = Field(
        default="",
        description="the scraper's targets API (/api/v1/targets), asked a tenth of a step apart for each agent's "
        "newest scrape; empty: the prometheus URL's own (vmagent or a Prometheus agent in front of a store: its URL)",
    )
    lost_on_refused: bool = Field(
        default=True,
        description="a node agent whose scrape was refused (nothing listens on its port) is lost at once; false: "
        "after two failed scrapes, as for any other failure (a timeout)",
    )

    @field_validator("targets_url")
    @classmethod
    def _targets_url(cls, value: str) -> str:
        if value and not value.startswith(("http://", "https://")):
            raise ValueError("must be empty or an http(s) URL, e.g. http://vmagent:8429")
        return value

    @field_validator("node_url")
    @classmethod
    def _node_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")) or "{host}" not in value:
            raise ValueError("must be an http(s) URL naming {host}, e.g. http://{host}:9484")
        if value.replace("{host}", "").count("{") or value.count("}") != value.count("{host}"):
            raise ValueError("{host} is the only placeholder allowed")
        if any(c in value for c in "#?@ \t\n\\"):
            raise ValueError(
                "must be an http(s) URL without query, fragment or user, e.g. http://{host}:9484"
            )
        return value

    @field_validator("shard")
    @classmethod
    def _shard(cls, value: str) -> str:
        if value and not SHARD_NAME.fullmatch(value):
            raise ValueError(f"'{value[:40]}': 1 to 32 of a-z, 0-9 and '-', starting with a letter or digit")
        return value

    @field_validator("shards")
    @classmethod
    def _shards(cls, value: dict[str, str]) -> dict[str, str]:
        for name, url in value.items():
            if not SHARD_NAME.fullmatch(name):
                raise ValueError(f"{name[:40]!r}: a shard name is 1 to 32 of a-z, 0-9 and '-'")
            if not url.startswith(("http://", "https://")) or any(c in url for c in "#?@ \t\n"):
                raise ValueError(f"{name}: must be an http(s) URL without query, fragment or user")
        return value

    @field_validator("nodes")
    @classmethod
    def _nodes(cls, value: dict[str, str]) -> dict[str, str]:
        for host, url in value.items():
            error = host_name_error(host)
            if error:
                raise ValueError(f"{host[:40]!r}: {error}")
            if not url.startswith(("http://", "https://")) or any(c in url for c in "#?@ \t\n"):
                raise ValueError(f"{host[:40]}: must be an http(s) URL without query, fragment or user")
        return value


class LanesConfig(_Section):
    dev: str = Field(default="", description="the NIC whose lanes the service watches; empty: none")
    netns: str = ""


class NotifyConfig(_Section):
    webhooks: list[WebhookConfig] = Field(default_factory=list)
    retry_max_s: float = Field(default=300.0, gt=0, le=86_400, description="longest wait between retries")
    give_up_after_s: float = Field(default=86_400.0, gt=0, le=30 * 86_400)
    timeout_s: float = Field(default=5.0, gt=0, le=120)
    console_url: str = Field(
        default="",
        pattern=r"^(https?://\S+)?$",
        description="the console's address as people reach it: every sink links to its incident pages",
    )
    severity: SeverityConfig = Field(default_factory=SeverityConfig)  # severity from impact, per sink kind
    ticket: TicketConfig = Field(default_factory=TicketConfig)  # where open_ticket files (Jira, ServiceNow)
    undiagnosed_hold_s: float = Field(
        default=300.0,
        ge=0,
        le=86_400,
        description="an incident with no diagnosis pages only after this long, unless a diagnosed one covers it",
    )


class LlmConfig(_Section):
    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    timeout_s: float = Field(default=30.0, gt=0, le=600)
    temperature: float = Field(default=0.0, ge=0, le=2)
    max_steps: int = Field(default=8, ge=1, le=100)
    max_tool_calls: int = Field(default=16, ge=0, le=500)
    max_tokens: int = Field(default=60_000, ge=1000, le=10_000_000)
    completion_max_tokens: int = Field(
        default=2048, ge=16, le=200_000, description="the most max_tokens sent with a completion request"
    )
    tokens_per_s: float = Field(
        default=30.0,
        gt=0,
        le=100_000,
        description="the endpoint's assumed generation speed: max_tokens = 0.8 x timeout_s x this (at most "
        "completion_max_tokens), so a request the chat gives up on does not hold the server",
    )
    sql_max_rows: int = Field(default=200, ge=1, le=100_000)
    sql_max_bytes: int = Field(
        default=65_536, ge=1024, le=64 * 1024 * 1024, description="JSON bytes of one SQL result"
    )
    sql_timeout_s: float = Field(default=5.0, gt=0, le=300)
    whatif_horizon_s: float = Field(default=120.0, gt=0, le=3600)
    verify_max_claims: int = Field(default=12, ge=0, le=1000, description="claims re-run per answer")
    verify_budget_s: float = Field(
        default=15.0, gt=0, le=600, description="total claim re-run time per answer"
    )
    record_max_bytes: int = Field(
        default=65_536,
        ge=4096,
        le=64 * 1024 * 1024,
        description="one journal/audit record or stored tool result",
    )


def _listen_or_empty(value: str) -> str:
    """A `listen` setting: `host:port` (checked by `parse_listen`), or empty for off."""
    if value:
        parse_listen(value)
    return value


ListenAddress = Annotated[str, AfterValidator(_listen_or_empty)]


class HttpConfig(_Section):
    listen: ListenAddress = Field(default=DEFAULT_LISTEN, description="host:port; empty: no HTTP endpoint")
    token: str = Field(default="", description="bearer token for /api; empty: /api answers loopback only")
    token_file: str = Field(default="", description="read the token from this file instead")
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Host names requests may carry besides IP addresses, localhost and the listen host "
        "(a name a proxy or DNS gives the node); others get 421",
    )
    trusted_proxies: list[str] = Field(
        default_factory=list,
        description="reverse proxies (IP addresses or networks) whose X-Forwarded-For names the client; "
        "none: the connection's own address counts",
    )

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies(cls, value: list[str]) -> list[str]:
        for item in value:
            try:
                ipaddress.ip_network(item.strip(), strict=False)
            except ValueError:
                raise ValueError(
                    f"{item[:60]!r} is not an IP address or network (e.g. 10.0.0.5, 10.0.0.0/24)"
                ) from None
        return value


class ConsoleConfig(_Section):
    enabled: bool = Field(
        default=False,
        description="aiops run serves the web console at / on [http] listen (docs/CONSOLE.md)",
    )
    listen: ListenAddress = Field(
        default="",
        description="host:port of `aiops console serve` (the console alone); aiops run ignores it once "
        "`enabled` is written, and refuses it without",
    )
    secure_cookies: bool = Field(
        default=False, description="behind a TLS reverse proxy: session cookies only over HTTPS"
    )
    url: str = Field(
        default="",
        pattern=r"^(https?://\S+)?$",
        description="the console's address as people reach it (behind a proxy: the proxy's); notifications "
        "link to /incidents/<id> there ([notify] console_url, when set, wins)",
    )
    grafana_url: str = Field(
        default="",
        pattern=r"^(https?://\S+)?$",
        description="a Grafana with deploy/grafana's dashboards: incident pages link each plot to its panel",
    )
    idle_timeout_s: float = Field(default=1800.0, gt=0, le=86_400, description="sign out after this idle")
    max_age_s: float = Field(default=43_200.0, gt=0, le=7 * 86_400, description="a session's longest life")
    oidc: OidcConfig = Field(default_factory=OidcConfig)  # single sign-on (aiops/config_oidc.py)


class AlertmanagerInConfig(_Section):
    token_file: str = Field(
        default="",
        description="bearer token Alertmanager sends to POST /api/alertmanager, read from this file; "
        "empty: the route is off (404)",
    )
    max_investigations: int = Field(
        default=200,
        ge=1,
        le=100_000,
        description="alert investigations run per flush at most (the rest wait)",
    )
    budget_s: float = Field(
        default=2.0,
        gt=0,
        le=600,
        description="seconds of alert investigations per flush at most (the rest wait)",
    )
    max_waiting: int = Field(
        default=1000,
        ge=1,
        le=100_000,
        description="firing alerts waiting past a flush at most; the oldest beyond are shed and counted",
    )


class GuardrailsConfig(_Section):
    proposal_ttl_s: float = Field(default=86_400.0, gt=0, le=30 * 86_400)
    intended_ttl_s: float = Field(
        default=72 * 3600.0,
        gt=0,
        le=365 * 86_400,
        description="how long an executed action's state stays expected (not an incident) unless replaced",
    )
    allowed_signers: str = Field(
        default="",
        description='OpenSSH allowed-signers file (namespaces="aiops-approval"); empty: nobody approves',
    )
    signing_key: str = Field(
        default="", description="your key for approvals: a private key file, or a .pub held by ssh-agent"
    )
    witness: str = Field(default="", description="the audit chain's witness file; empty: <db>.witness")
    approvers: dict[str, list[Literal["physical", "policy", "breaker"]]] = Field(
        default_factory=dict,
        description="principal -> what they may decide: physical proposals, response policies, breaker overrides",
    )
    breaker: BreakerConfig = Field(default_factory=BreakerConfig)  # aiops/config_breaker.py
    runbook: str = Field(
        default="",
        description="a standing runbook file (docs/GUARDRAILS.md): plan steps it covers run at the next flush "
        "without a live signature while people's approval of its exact bytes stands; empty: off",
    )


class ReportConfig(_Section):
    enabled: bool = False
    cron: str = Field(default="0 6 * * *", description="when to write a report: 5 cron fields, UTC")
    out_dir: str = Field(default="", description="where reports go; empty: <store path>.reports/")
    keep_last: int = Field(default=30, ge=1, le=100_000, description="reports kept (older ones deleted)")
    formats: str = Field(default="html,md", description="comma-separated: html, md, pdf (pdf needs chromium)")
    since: str = Field(default="24h", description="the period each report covers, before its time")

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        try:
            parse_cron(value)
        except ConfigError as exc:
            allowed = exc.allowed if isinstance(exc.allowed, str) else ", ".join(exc.allowed or ())
            raise ValueError(f"{exc.problem} (allowed: {allowed})") from None
        return value

    @field_validator("formats")
    @classmethod
    def _formats(cls, value: str) -> str:
        names = [p.strip() for p in value.split(",") if p.strip()]
        if not names or any(n not in REPORT_FORMATS for n in names):
            raise ValueError(f"{value!r}: each must be one of {', '.join(REPORT_FORMATS)}")
        return value

    @field_validator("since")
    @classmethod
    def _since(cls, value: str) -> str:
        if not re.match(r"^\s*\d+(\.\d+)?\s*[smhdw]\s*$", value) or not float(re.sub(r"[^\d.]", "", value)):
            raise ValueError(f"{value!r} is not a duration (allowed: a number and s, m, h, d or w: 24h, 7d)")
        return value


PROFILE_LABELS_DEFAULT = "input_pipeline_bottleneck,application_error"


class ProfileConfig(_Section):
    on_incident: bool = Field(
        default=False,
        description="profile this host's CUDA processes (aiops profile) when an incident with one of `labels` "
        "is diagnosed on this node; needs root or CAP_BPF+CAP_PERFMON and bcc",
    )
    duration_s: float = Field(default=30.0, gt=0, le=600, description="seconds each process is profiled")
    labels: str = Field(
        default=PROFILE_LABELS_DEFAULT, description="comma-separated root-cause labels that trigger a profile"
    )
    max_per_hour: int = Field(default=4, ge=1, le=60, description="triggered profiling runs per hour at most")
    max_processes: int = Field(
        default=2, ge=1, le=64, description="CUDA processes profiled per trigger (the busiest by CPU time)"
    )
    out_dir: str = Field(default="", description="where outputs go; empty: <store path>.profiles/")

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: str) -> str:
        names = [p.strip() for p in value.split(",") if p.strip()]
        known = {label.value for label in Label}
        unknown = [n for n in names if n not in known]
        if not names or unknown:
            raise ValueError(
                f"{value!r}: each must be a root-cause label (allowed: {', '.join(sorted(known))})"
            )
        return value

    def label_set(self) -> frozenset[str]:
        return frozenset(p.strip() for p in self.labels.split(",") if p.strip())


class Config(_Section):
    node: NodeConfig = Field(default_factory=NodeConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    collectors: CollectorsConfig = Field(default_factory=CollectorsConfig)
    detection: DetectionConfig = Field(default_factory=DetectionConfig)
    fleet: FleetConfig = Field(default_factory=FleetConfig)
    lanes: LanesConfig = Field(default_factory=LanesConfig)
    dcim: DcimConfig = Field(default_factory=DcimConfig)
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    facility: FacilityConfig = Field(default_factory=FacilityConfig)
    notify: NotifyConfig = Field(default_factory=NotifyConfig)
    llm: LlmConfig = Field(default_factory=LlmConfig)
    http: HttpConfig = Field(default_factory=HttpConfig)
    console: ConsoleConfig = Field(default_factory=ConsoleConfig)
    alertmanager_in: AlertmanagerInConfig = Field(default_factory=AlertmanagerInConfig)
    guardrails: GuardrailsConfig = Field(default_factory=GuardrailsConfig)
    report: ReportConfig = Field(default_factory=ReportConfig)
    profile: ProfileConfig = Field(default_factory=ProfileConfig)
    chatops: ChatopsConfig = Field(default_factory=ChatopsConfig)  # aiops/config_chatops.py
    source: str = Field(default="defaults", exclude=True)

    @property
    def console_url(self) -> str:
        """Where people reach the console: `[notify] console_url`, else `[console] url`; "" when neither."""
        return (self.notify.console_url or self.console.url).rstrip("/")


def parse_listen(value: str) -> tuple[str, int]:
    """`host:port` (IPv6 in brackets) -> (host, port); ValueError naming what is wrong. Port 0 asks the kernel
    for any free port (the one bound is logged at start): what tests and side-by-side agents use."""
    host, sep, port = value.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()) or not 0 <= int(port) < 65536:
        raise ValueError("must be host:port with a port 0-65535 (0: any free port), e.g. 127.0.0.1:9484")
    host = host.strip("[]")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if host != "localhost":
            raise ValueError("host must be an IP address or localhost") from None
    return host, int(port)


_MODELS: dict[str, type[BaseModel]] = {
    name: field.annotation  # type: ignore[misc]
    for name, field in Config.model_fields.items()
    if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
}
_MODELS.update({f"collectors.{n}": CollectorConfig for n in CollectorsConfig.model_fields if n != "root"})
_MODELS["notify.webhooks"] = WebhookConfig
_MODELS["notify.severity"] = SeverityConfig
_MODELS["notify.ticket"] = TicketConfig
_MODELS["chatops.slack"] = SlackConfig
_MODELS["console.oidc"] = OidcConfig
_MODELS.update(
    {
        f"facility.{n}": FacilitySeries
        for n, f in FacilityConfig.model_fields.items()
        if f.annotation is FacilitySeries
    }
)


def _key(loc: Sequence[int | str]) -> str:
    return ".".join(str(p) if isinstance(p, str) else f"[{p}]" for p in loc).replace(".[", "[")


def _allowed(loc: Sequence[int | str], error: Mapping[str, Any]) -> list[str] | str | None:
    if error["type"] == "extra_forbidden":
        parent = ".".join(str(p) for p in loc[:-1] if isinstance(p, str))
        model = HostIdentity if parent.startswith("node.hosts.") else _MODELS.get(parent, Config)
        return sorted(n for n in model.model_fields if n != "source")
    expected = (error.get("ctx") or {}).get("expected")
    if expected:
        return [w.strip().strip("'") for w in re.split(r",| or ", str(expected)) if w.strip()]
    return None


def parse_config(data: Any, source: str) -> Config:
    """Validate parsed TOML; raises ConfigError naming the file, the key and the allowed values."""
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = tuple(error["loc"])
        problem = "unknown key" if error["type"] == "extra_forbidden" else str(error["msg"])
        raise ConfigError(
            source, _key(loc) or "(top level)", problem.removeprefix("Value error, "), _allowed(loc, error)
        ) from None
    return config.model_copy(update={"source": source})


def load_config_file(path: str | Path) -> Config:
    where = Path(path).expanduser()
    if not where.exists():
        raise ConfigError(str(where), "(file)", "no such file")
    problem = permission_problem(where)  # it says who may approve: nobody else may be able to write it
    if problem is not None:
        raise ConfigError(str(where), "(file)", f"refused, as sshd's StrictModes would: {problem}")
    try:
        text = read_limited(where, ConfigError).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(str(where), "(file)", f"cannot read: {type(exc).__name__}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(where), "(file)", f"not TOML: {exc}") from None
    except RecursionError:  # tomllib recurses per nested array: 5,000 of them exhaust the stack
        raise ConfigError(str(where), "(file)", "not TOML: nested too deep") from None
    return parse_config(data, str(where))


def load_config(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Config:
    """The configuration: `path`, else $AIOPS_CONFIG (both must exist), else ~/.config/aiops/config.toml if it
    exists, else the defaults."""
    env = os.environ if env is None else env
    named = path or env.get("AIOPS_CONFIG")
    if named:
        return load_config_file(named)
    user = USER_CONFIG_PATH.expanduser()
    return load_config_file(user) if user.exists() else Config()


NODE_CHECKPOINT_MB = 4  # `[store] checkpoint_mb` of a node agent (0 in the config)
FLEET_CHECKPOINT_MB = 16  # DuckDB's own default: the fleet writes thousands of GPUs' rows a cycle


def store_checkpoint_mb(config: Config) -> int:
    """The write-ahead log the service lets grow before DuckDB checkpoints: `[store] checkpoint_mb`, else 4 MB on a
    node agent (what its rows since the last checkpoint hold in memory is its resident set's largest swing) and
    DuckDB's 16 MB on the fleet."""
    return config.store.checkpoint_mb or (
        FLEET_CHECKPOINT_MB if config.node.name == "fleet" else NODE_CHECKPOINT_MB
    )


NODE_BLOCK_SIZE = (
    16_384  # DuckDB's block of a workspace a node agent creates (DuckDB's smallest; its default 262,144)
)


def store_block_size(config: Config) -> int:
    """The block size of a workspace the service creates: 16 KB on a node agent, DuckDB's own (0) on the fleet.
    DuckDB reads and caches a whole block; on a node's few rows each table's appends and each window's scan touch
    the block that holds a column's last segment, which with 256 KB blocks was nearly every block of the file
    (docs/BENCHMARKS.md "The node service", round ten). A file keeps the block size it was made with."""
    return 0 if config.node.name == "fleet" else NODE_BLOCK_SIZE


NODE_MEMORY_LIMIT_MB = 32  # `[store] memory_limit_mb` of a node agent (0 in the config)
SERVICE_MEMORY_LIMIT_MB = 256  # the fleet's, and a console's that holds a workspace (`aiops console serve`)


def store_memory_limit_mb(config: Config) -> int:
    """DuckDB's memory limit in the service: `[store] memory_limit_mb`, else 32 MB on a node agent (its loop reads
    seconds of one node; at 256 its allocator kept ~3 MB more resident and its cached blocks could grow to 256,
    docs/BENCHMARKS.md) and 256 MB on the fleet, whose cycles pivot thousands of GPUs. Past it DuckDB evicts
    cached blocks and spills to `<db>.tmp`."""
    return config.store.memory_limit_mb or (
        SERVICE_MEMORY_LIMIT_MB if config.node.name == "fleet" else NODE_MEMORY_LIMIT_MB
    )


def store_threads(config: Config) -> int:
    """DuckDB's workers in the service: `[store] threads`, else one on a node agent (its queries cover seconds of
    one node; DuckDB's default, one per core, cost 38 MB more at 64: docs/BENCHMARKS.md) and DuckDB's default
    (0) on the fleet, whose cycles pivot thousands of GPUs. The commands open a workspace with the same number
    (aiops/cli/configured.py)."""
    return config.store.threads or (0 if config.node.name == "fleet" else 1)
