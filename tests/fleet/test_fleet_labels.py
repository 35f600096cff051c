"""Issue 36, H1 and medium 3: labels from the node agents' exports become names in the fleet only when valid, a
GPU belongs to the host its name holds and to the agent (scrape `instance`) that declares that host, and what is
refused is named. Four hand-written agents' exports (every expected row known) bulk-imported into a real
Prometheus with promtool and read back by the fleet's ingest:
- agent A (instance 10.0.0.1:9484) declares node-a and exports node-a/gpu0;
- agent B declares node-b; its own GPU's `node` label is a foreign URL (`127.0.0.1:19999/x#`, the issue's
  attack), it claims A's GPU node-a/gpu1 and exports a spoofed temperature of node-a/gpu0;
- agents C and D both declare node-c (a conflict: neither counts);
- hostile job and rack labels.
On main (cc01cd6) the foreign URL became node-b/gpu0's node, node-a/gpu1 joined the topology under node-b and
B's spoofed temperatures reached node-a/gpu0's samples. Then the dispatcher: a URL only from `[fleet.nodes]` or
the template filled with a valid host name, a token per host from `node_token_dir`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from aiops.config import FleetConfig
from aiops.fleet.dispatch import NodeDirectory
from aiops.fleet.ingest import fetch_interval
from aiops.sources.prometheus import PrometheusClient
from aiops.store import Store, Workspace
from tests.console_helpers import add_users, client, sign_in
from tests.prometheus_process import backfilled

T0 = 1_767_225_600.0
STEP_S = 15.0
SCRAPES = 4
FOREIGN = "127.0.0.1:19999/x#"
A, B, C, D = "10.0.0.1:9484", "10.0.0.2:9484", "10.0.0.3:9484", "10.0.0.4:9484"
FLEET = "10.0.0.9:9090"


def _exposition() -> str:
    ts = [T0 + STEP_S * k for k in range(SCRAPES)]
    families: dict[str, list[str]] = {}

    def sample(family: str, labels: str, value: float) -> None:
        families.setdefault(family, []).extend(f"{family}{{{labels}}} {value} {t}" for t in ts)

    for instance, node in ((A, "node-a"), (B, "node-b"), (C, "node-c"), (D, "node-c")):
        sample("aiops_node_info", f'instance="{instance}",node="{node}",rack="rack0"', 1)
    sample("aiops_gpu_info", f'instance="{A}",node="node-a",rack="rack0",gpu="node-a/gpu0",index="0"', 1)
    sample("aiops_gpu_info", f'instance="{B}",node="{FOREIGN}",rack="rack0",gpu="node-b/gpu0",index="0"', 1)
    sample("aiops_gpu_info", f'instance="{B}",node="node-b",rack="rack0",gpu="node-a/gpu1",index="1"', 1)
    sample("aiops_gpu_info", f'instance="{C}",node="node-c",rack="rack0",gpu="node-c/gpu0",index="0"', 1)
    sample("aiops_gpu_temperature_celsius", f'instance="{A}",node="node-a",gpu="node-a/gpu0"', 55)
    sample("aiops_gpu_temperature_celsius", f'instance="{B}",node="node-a",gpu="node-a/gpu0",xid="1"', 99)
    sample("aiops_gpu_temperature_celsius", f'instance="{B}",node="{FOREIGN}",gpu="node-b/gpu0"', 60)
    sample("aiops_gpu_temperature_celsius", f'instance="{C}",node="node-c",gpu="node-c/gpu0"', 70)
    sample("aiops_node_info", f'instance="{A}",node="node-x",rack="../../etc"', 1)
    # the fleet's own export, scraped by the same store (the chart scrapes the fleet): read back, never refused
    own = f'instance="{FLEET}",node="fleet",incident_id="fleet-INC-0001",severity="page",root_cause="x",component=""'
    sample("aiops_incident_opened_timestamp_seconds", own, T0)
    sample(
        "aiops_job_rank_info", f'instance="{A}",job="evil job;rm",rank="0",gpu="node-a/gpu0",node="node-a"', 1
    )
    families["aiops_job_step_duration_seconds_count"] = [
        f'aiops_job_step_duration_seconds_count{{instance="{A}",job="llm"}} {k + 1} {t}'
        for k, t in enumerate(ts)
    ]
    families["aiops_job_step_duration_seconds_sum"] = [
        f'aiops_job_step_duration_seconds_sum{{instance="{A}",job="llm"}} {2.0 * (k + 1)} {t}'
        for k, t in enumerate(ts)
    ]
    sample("aiops_job_last_step_timestamp_seconds", f'instance="{A}",job="llm"', 1e300)
    # the job's home (A) names its slowest rank's GPU on another node: a reference, not a claim
    families["aiops_job_slowest_rank_steps_total"] = [
        f'aiops_job_slowest_rank_steps_total{{instance="{A}",job="llm",rank="1",gpu="node-b/gpu0",node="node-a"}} '
        f"{k + 1} {t}"
        for k, t in enumerate(ts)
    ] + [  # rank 3 was as often slowest: a tie names the lowest rank, the same on every read
        f'aiops_job_slowest_rank_steps_total{{instance="{A}",job="llm",rank="3",gpu="node-a/gpu0",node="node-a"}} '
        f"{k + 1} {t}"
        for k, t in enumerate(ts)
    ]
    lines: list[str] = []
    for family, samples in families.items():
        lines += [f"# TYPE {family} gauge", *samples]
    return "\n".join([*lines, "# EOF", ""])


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with backfilled(tmp_path_factory.mktemp("fleet-labels"), _exposition()) as url:
        yield url


def test_labels_become_names_only_when_valid_and_owned(prometheus: str, tmp_path: Path) -> None:
    with Store(tmp_path / "fleet.duckdb") as store:
        report = fetch_interval(
            store, PrometheusClient(prometheus), start_s=T0, end_s=T0 + STEP_S * (SCRAPES - 1), step_s=STEP_S
        )
        topology = {r["component"]: r for r in store.query("SELECT * FROM topology")}
        temps = store.query("SELECT DISTINCT gpu, node, temp_c FROM gpu_samples ORDER BY gpu")
        step_times = [r["ts_s"] for r in store.query("SELECT ts_s FROM job_steps")]
        slowest = {r["slowest_gpu"] for r in store.query("SELECT slowest_gpu FROM job_steps")}
        everything = " ".join(
            str(v)
            for table in ("topology", "gpu_samples", "job_ranks")
            for r in store.query(f"SELECT * FROM {table}")
            for v in r.values()
        )
    # the foreign URL names nothing; B's own GPU stays B's (its name's host, declared by B's instance)
    assert FOREIGN not in everything and "127.0.0.1" not in everything
    assert topology["node-b/gpu0"]["node"] == "node-b" and topology["node-b/gpu0"]["parent"] == "node-b"
    assert topology["node-a/gpu0"]["node"] == "node-a"
    # B cannot claim A's GPU, nor speak for it; node-c (declared twice) is nobody's; hostile names name nothing
    assert "node-a/gpu1" not in topology and "node-c" not in topology and "node-c/gpu0" not in topology
    assert "../../etc" not in everything and "evil job;rm" not in everything
    assert temps == [
        {"gpu": "node-a/gpu0", "node": "node-a", "temp_c": 55.0},
        {"gpu": "node-b/gpu0", "node": "node-b", "temp_c": 60.0},
    ]
    # a time a node exports as a value (its last step's) counts only up to the scrape that read it
    assert step_times and all(T0 <= t <= T0 + STEP_S * SCRAPES for t in step_times), step_times
    assert (
        slowest == {"node-b/gpu0"}
    )  # a job's series may name another node's GPU (its home reports its ranks); rank 1 ties rank 3 and is lower
    # each refusal is counted and named (the fleet logs these lines once each)
    refused = report.refusals.counts
    assert refused["node label not a valid name"] >= 2 and refused["rack label not a valid name"] >= 1
    assert refused["job label not a valid name"] >= 1
    assert refused["series about another instance's node"] >= 2  # B's claim on node-a/gpu1, its spoofed temp
    assert refused["node declared by several instances"] >= 3
    shown = "\n".join(report.refusals.examples)
    # the fleet's own export: not refused, not read
    assert "fleet" not in shown and "fleet-INC-0001" not in everything
    assert "127.0.0.1:19999/x#" in shown and "node-a/gpu1" in shown and "node-c" in shown
    assert shown.isascii() and "\x1b" not in shown


def test_dispatch_urls_come_from_the_config_or_a_valid_host_in_the_template(tmp_path: Path) -> None:
    fleet = FleetConfig(node_url="http://{host}:9484", nodes={"node0": "http://127.0.0.1:8001"})
    directory = NodeDirectory(fleet, "shared-token")
    assert directory.url("node0") == "http://127.0.0.1:8001/api/dispatch"
    assert directory.url("gpu-a100-017") == "http://gpu-a100-017:9484/api/dispatch"
    for hostile in (
        FOREIGN,
        "127.0.0.1:19999",
        "evil.example/x",
        "a@b",
        "node1#",
        "Node1",
        "fleet",
        "",
        "a b",
    ):
        assert directory.url(hostile) is None, hostile
    assert directory.token_for("node0") == "shared-token"
    path_template = NodeDirectory(FleetConfig(node_url="https://gw.example:8443/nodes/{host}"))
    assert path_template.url("node3") == "https://gw.example:8443/nodes/node3/api/dispatch"
    # one token per host: node0's file opens node0 only; a host without a file gets nothing sent
    (tmp_path / "tokens").mkdir()
    (tmp_path / "tokens" / "node0").write_text("token-of-node0\n")
    per_host = NodeDirectory(FleetConfig(node_token_dir=str(tmp_path / "tokens")), "shared-token")
    assert per_host.token_for("node0") == "token-of-node0"
    assert per_host.token_for("node1") is None and per_host.token_for("../tokens/node0") is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("node_url", "http://{host}:9484/x#"),
        ("node_url", "http://user@{host}:9484"),
        ("nodes", {"127.0.0.1:19999/x#": "http://127.0.0.1:1"}),
        ("nodes", {"node1": "http://127.0.0.1:1/x#"}),
    ],
)
def test_hostile_dispatch_urls_are_refused_in_the_config(field: str, value: object) -> None:
    with pytest.raises(ValueError):
        FleetConfig.model_validate({field: value})


def test_a_hostile_time_never_breaks_the_collectors_page(tmp_path: Path) -> None:
    """Issue 36, low: the fleet console's /collectors answered 500 for a stored time no clock shows (a node
    exported `aiops_job_last_step_timestamp_seconds 1e300` and it became a job_steps row's time)."""
    db = tmp_path / "fleet.duckdb"
    with Workspace(db).write() as store:
        store.conn.execute("INSERT INTO job_steps (ts_s, job, step, step_time_s) VALUES (1e300, 'j', 1, 1.0)")
    add_users(db)
    c = client(db)
    sign_in(c, "alice")
    page = c.get("/collectors")
    assert page.status_code == 200 and "invalid time" in page.text
