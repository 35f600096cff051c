"""No flush step waits on another system while it holds the workspace (aiops/service/flush_steps.py): each
step that calls out (a scheduler, a ticket sink, a node's actuators) reads what it needs with the workspace
open, calls with it closed, and writes the answer in a second short hold, so a slow scheduler or sink keeps
neither the console, the API nor a lease waiting.

Each test runs one `Service` flush (started, one flush, closed) over a small workspace, with the outside
system's real client (the official Kubernetes client against tests/k8s_api.py on 127.0.0.1) wrapped in a
`Probe` that notes, at each call, whether the calling thread holds the service's workspace
(`FileOwner.held_here`), as tests/test_dispatch_fleet.py does for the fleet's POSTs to node agents; the ticket
sink's HTTP client is wrapped the same way. Slurm's scontrol and sinfo take the same paths (one route flag, one
`HeldView`): the last test checks every scheduler backend's routes carry the flag."""

from __future__ import annotations

import threading
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from aiops import outbound
from aiops.config import FleetConfig, SchedulerConfig, parse_config
from aiops.config_notify import TicketConfig
from aiops.fleet.dispatch import FleetDispatcher
from aiops.fleet.scopes import scheduler_actuator
from aiops.integrations.ticket import TicketActuator
from aiops.runtime.schedulers import SCHEDULER_BACKENDS, scheduler_routes
from aiops.runtime.world import attach
from aiops.service.service import Service
from aiops.service.slack_request import button_value
from aiops.service.sources import Sources
from aiops.store import Store, Workspace
from guardrails.actions import action_hash
from guardrails.actuators_k8s import core_api
from guardrails.proposal_desk import Guardrails
from guardrails.records import GuardrailRecords
from guardrails.routing import RoutingActuator, acts_remotely
from tests.dispatch_helpers import TOKEN, body, post, signed
from tests.fleet.test_fleet_scopes import act, file_and_approve, fleet_workspace
from tests.k8s_api import Cluster, k8s_api, pod
from tests.notify.test_ticket_sink import TOKEN as TICKET_TOKEN
from tests.notify.test_ticket_sink import USER, ticket_action, ticket_server
from tests.signing_helpers import Keys, make_keys
from tests.slack_helpers import BOT_TOKEN, SECRET, fake_slack, press_payload, signed_post


class Probe:
    """`inner` (an API client) whose every method call first notes (method, workspace held by the caller)."""

    def __init__(self, inner: Any, held: Callable[[], bool]) -> None:
        self.inner, self.held, self.calls = inner, held, list[tuple[str, bool]]()

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.inner, name)
        if not callable(found):
            return found

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, self.held()))
            return found(*args, **kwargs)

        return call

    def held_at(self, *methods: str) -> list[str]:
        """The calls of `methods` (all when none is named) made with the workspace held."""
        return [name for name, held in self.calls if held and (not methods or name in methods)]


def service_on(workspace: Workspace, keys: Keys, **parts: Any) -> Service:
    """A service over `workspace` with no telemetry source and no HTTP listener (its flush runs the steps)."""
    document = tomllib.loads(keys.config.read_text())
    document.update(store={"path": str(workspace.path)}, http={"listen": ""})
    return Service(
        parse_config(document, "test config"),
        sources=lambda _: Sources([], time.time, declares_inventory=False),
        **parts,
    )


def status(workspace: Workspace, pid: str) -> tuple[str, str]:
    with workspace.read() as store:
        record = GuardrailRecords(store).proposal(pid)
    assert record is not None
    return record.status, record.message


def job_cluster(tmp_path: Path, *, approved: bool = True) -> tuple[Workspace, Keys, Cluster]:
    """A fleet workspace whose job `k8s-ml_trainer` runs on node0 and node1 (its restart P-k8s approved by alice
    when `approved`), and the Kubernetes cluster its pods run in."""
    keys = make_keys(tmp_path / "keys", ("alice",))
    nodes = ("node0", "node1")
    cluster = Cluster()
    workspace = fleet_workspace(tmp_path / "fleet.duckdb", keys.guardrails)
    with workspace.write() as store:
        ranks = [("k8s-ml_trainer", n, f"{name}/gpu0", name, f"{name}/nic0") for n, name in enumerate(nodes)]
        store.conn.executemany("INSERT INTO job_ranks VALUES (?, ?, ?, ?, ?)", ranks)
    for n, name in enumerate(nodes):
        cluster.add_node(name)
        cluster.pods.append(pod(f"trainer-{n}", "ml", name, ("Job", "trainer")))
    if approved:
        file_and_approve(workspace, keys, act("P-k8s", "restart_job", "job:k8s-ml_trainer"), "alice")
    return workspace, keys, cluster


def test_the_fleets_scheduler_step_and_breaker_view_call_kubernetes_with_its_workspace_closed(
    tmp_path: Path,
) -> None:
    """`[fleet.scheduler]`'s job restart: claimed with the workspace open, the pods deleted through the API
    with it closed, the execution and read-back written in the second hold (proposal executed). The view of
    cordoned nodes the fleet's breaker counts (`list_node`) is read before the flush holds the workspace."""
    workspace, keys, cluster = job_cluster(tmp_path)
    with k8s_api(cluster) as url:
        api = Probe(core_api(host=url), lambda: service.owner.held_here())
        fleet = FleetConfig(scheduler=SchedulerConfig(kind="kubernetes"))
        service = service_on(workspace, keys, dispatcher=FleetDispatcher(fleet, TOKEN, kube_api=api))
        assert service.run(duration_s=0.0) == 0  # started, one flush, closed
    names = [name for name, _ in api.calls]
    assert "delete_namespaced_pod" in names and "list_node" in names, api.calls
    held = api.held_at()
    assert not [n for n in held if n != "list_node"], f"the scheduler step waited inside: {api.calls}"
    assert "list_node" not in held, f"the breaker's view was read inside: {api.calls}"
    assert status(workspace, "P-k8s")[0] == "executed", status(workspace, "P-k8s")
    deleted = sorted(r["path"] for r in cluster.requests if r["method"] == "DELETE")
    assert deleted == ["/api/v1/namespaces/ml/pods/trainer-0", "/api/v1/namespaces/ml/pods/trainer-1"]


def node_service(
    workspace: Workspace,
    keys: Keys,
    api: Probe | None = None,
    tick: Callable[[], None] = lambda: None,
    token: str = "",
    **config: Any,
) -> Service:
    """node0's agent over `workspace` (its `[scheduler]` Kubernetes through the API client `api` when given;
    the sections `config` besides; `tick` run at each tick of its loop; `token` its /api token), whose flushes judge as if telemetry
    had come (so the detection step's desks are made: the breaker, the approved proposals)."""
    document = tomllib.loads(keys.config.read_text())
    document.update(store={"path": str(workspace.path)}, http={"listen": ""}, node={"name": "node0"})
    document.update(config)
    if api is not None:
        document.update(scheduler={"kind": "kubernetes", "node_name": "node0"})
    service = Service(
        parse_config(document, "test config"),
        sources=lambda _: Sources([], time.time, tick=tick, declares_inventory=False),
        kube_api=api,
        token=token,
    )
    service.newest_ts_s = service.first_ts_s = time.time()  # the detection step runs in each flush
    return service


def test_a_nodes_scheduler_is_called_with_its_workspace_closed(tmp_path: Path) -> None:
    """A node agent whose `[scheduler]` is Kubernetes: the view of cordoned nodes its breaker counts each flush
    (and its desks validate with) is read before the flush holds the workspace, and an approved restart of
    its job runs through the API after it (claimed inside, executed and read back in the second hold)."""
    workspace, keys, cluster = job_cluster(tmp_path)
    with k8s_api(cluster) as url:
        api = Probe(core_api(host=url), lambda: service.owner.held_here())
        service = node_service(workspace, keys, api)
        assert service.run(duration_s=0.0) == 0
    names = [name for name, _ in api.calls]
    assert "list_node" in names and "delete_namespaced_pod" in names, api.calls
    held = api.held_at()
    assert "list_node" not in held, f"the breaker's view was read inside: {api.calls}"
    assert not held, f"the scheduler's action waited inside: {api.calls}"
    assert status(workspace, "P-k8s")[0] == "executed", status(workspace, "P-k8s")


def test_a_dispatch_from_the_fleet_runs_on_the_nodes_scheduler_with_its_workspace_closed(
    tmp_path: Path,
) -> None:
    """The fleet POSTs a restart of a job with a rank on node0, signed by alice, to node0's /api/dispatch; the
    node's flush judges and claims it, its Kubernetes API restarts the job's pods with the workspace closed,
    and the answer (executed, the node's audit row) is written and returned from the second hold."""
    workspace, keys, cluster = job_cluster(tmp_path, approved=False)
    restart = act("F-k8s", "restart_job", "job:k8s-ml_trainer")
    answers: list[tuple[int, dict[str, Any]]] = []

    def fleet_posts() -> None:  # the request waits on the node's loop: sent from its own thread
        assert service.http is not None
        url = f"http://{service.http.address}/api/dispatch"
        answers.append(post(url, body(restart, [signed(restart, keys.keys["alice"])]), TOKEN))
        service.stop()

    sender = threading.Thread(target=fleet_posts, daemon=True)

    def tick() -> None:  # the loop's first tick: the HTTP listener serves by then
        if not sender.is_alive() and not answers:
            sender.start()

    with k8s_api(cluster) as url:
        api = Probe(core_api(host=url), lambda: service.owner.held_here())
        service = node_service(
            workspace,
            keys,
            api,
            tick=tick,
            token=TOKEN,
            http={"listen": "127.0.0.1:0"},
            store={"path": str(workspace.path), "flush_interval_s": 0.1},
        )
        assert service.run(duration_s=30.0) == 0  # until the answer came (the sender stops the loop)
        sender.join(timeout=5)
    assert answers and answers[0][0] == 200 and answers[0][1]["status"] == "executed", answers
    names = [name for name, _ in api.calls]
    assert "delete_namespaced_pod" in names, api.calls
    assert not api.held_at(), f"the dispatched action waited inside: {api.calls}"
    assert status(workspace, "F-k8s")[0] == "executed", status(workspace, "F-k8s")


def test_an_open_ticket_run_from_slack_is_filed_with_the_workspace_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`[notify.ticket]`: alice presses Run on a pending open_ticket in Slack; the next flush claims it, POSTs it
    to Jira with the workspace closed (the HTTP client notes the hold at each request), and writes the execution
    naming the issue in the second hold. The ticket's text names the incident, read in the first hold."""
    workspace, keys, _ = job_cluster(tmp_path)
    ticket = ticket_action("P-ticket").model_copy(update={"target": "node0/gpu1"})
    with workspace.write() as store:
        filed = Guardrails(store).propose(ticket, origin="test", incident_id="INC-node0-0001")
    assert filed.status == "pending", filed.message
    for name, text in (("signing-secret", SECRET), ("bot-token", BOT_TOKEN), ("jira-token", TICKET_TOKEN)):
        (tmp_path / name).write_text(text + "\n")
    held_at_post: list[bool] = []
    real_request = outbound.request

    def request(*args: Any, **kwargs: Any) -> Any:
        held_at_post.append(service.owner.held_here())
        return real_request(*args, **kwargs)

    pressed: list[tuple[int, dict[str, Any]]] = []

    def press() -> None:  # the loop's first tick: the HTTP listener serves by then
        if not pressed:
            assert service.http is not None
            url = f"http://{service.http.address}/api/slack/actions"
            pressed.append(signed_post(url, press_payload(button_value("P-ticket", action_hash(ticket)))))

    monkeypatch.setattr(outbound, "request", request)
    with fake_slack() as slack, ticket_server() as jira:
        slack_config = {
            "signing_secret_file": str(tmp_path / "signing-secret"),
            "bot_token_file": str(tmp_path / "bot-token"),
            "api_url": slack.url,
            "channel": "C0INCIDENTS",
            "users": {"U0ALICE": "alice"},
        }
        sink = {"kind": "jira", "url": jira.url, "user": USER, "token_file": str(tmp_path / "jira-token")}
        service = node_service(
            workspace,
            keys,
            tick=press,
            http={"listen": "127.0.0.1:0"},
            chatops={"slack": slack_config},
            notify={"ticket": {**sink, "project": "OPS"}},
        )
        assert service.run(duration_s=0.2) == 0  # a tick (the press), then the last flush
        filed_in_jira = list(jira.got)
    assert pressed and pressed[0][0] == 200 and pressed[0][1]["ok"], pressed
    assert len(filed_in_jira) == 1, filed_in_jira
    assert held_at_post and not any(held_at_post), "the ticket's POST waited inside the flush's hold"
    assert "incident INC-node0-0001" in filed_in_jira[0]["body"]["fields"]["description"]
    assert status(workspace, "P-ticket")[0] == "executed", status(workspace, "P-ticket")
    with workspace.read() as store:
        execution = GuardrailRecords(store).execution("P-ticket") or {}
    assert execution["result"]["detail"]["ticket"] == "OPS-1", execution


def test_every_scheduler_backend_and_the_ticket_sink_are_called_after_the_flush() -> None:
    """What the flush calls after its hold is what `acts_remotely` says calls another system: every action kind
    of every `[scheduler]` backend in the registry (Slurm's scontrol as much as Kubernetes' API, whose calls the
    tests above catch inside), the fleet's `[fleet.scheduler]` client's, and `[notify.ticket]`'s open_ticket.
    A backend added, or a route built, without `remote=True` fails here."""
    action = act("P-any", "restart_job", "job:any")
    sink = TicketActuator(TicketConfig(url="http://127.0.0.1:9", token_file="unused", project="OPS"), "token")
    with Store(":memory:") as store:
        for kind, backend in SCHEDULER_BACKENDS.items():
            store.scheduler = SchedulerConfig(kind=kind, node_name="node0")  # type: ignore[arg-type]
            routing = RoutingActuator(scheduler_routes(store, "node0", object()))
            for one in backend.action_kinds:
                assert acts_remotely(routing, action.model_copy(update={"kind": one})), (kind, one)
            fleet = scheduler_actuator(store.scheduler, object())
            assert fleet is not None and acts_remotely(fleet, action), kind
        ticket = attach(store, actuator="none", ticket=sink)
        assert acts_remotely(ticket.actuator, action.model_copy(update={"kind": "open_ticket"}))
        assert not acts_remotely(
            attach(store, actuator="none").actuator, action
        )  # nothing acts: nothing later
