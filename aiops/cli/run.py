"""`aiops run [--config FILE] [--db PATH] [--listen HOST:PORT] [--node NAME] [--hostname HOST] [--sim SCENARIO
[--speed N] [--epoch-ts-s T]]`: the node service.

On a real host it collects what exists here; with `--sim` the same service runs against the twin: the whole
cluster, or with `--node nodeK` one node agent of it (its own slice, aiops/service/sources.py). `--db` and
`--listen` override the config file; `--hostname` stands for the kernel's host name (the Helm chart passes the
Kubernetes node's name). SIGTERM and SIGINT end it after a last flush (exit 0). Logs are JSON lines on stderr.
See docs/DEPLOY.md.
"""

from __future__ import annotations

import argparse
import signal
import socket
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from pydantic import ValidationError

from aiops.cli.args import positive_float, seconds
from aiops.cli.configured import agent_config
from aiops.config import Config, NodeConfig, load_config, node_of, parse_listen
from aiops.errors import ConfigError
from aiops.labels import host_name_error
from aiops.service import logs
from aiops.service.malloc import START_UP_S, limit_arenas, release_start_up_code
from aiops.service.node_slice import FACILITY
from aiops.service.service import Service, SimSetup
from aiops.service.sources import check_node

if TYPE_CHECKING:
    from aiops.console.server import ServedConsole


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("run", help="the node service: collect, detect live, serve metrics and an API, notify")
    p.add_argument("--config", default=None, help="TOML config (default: $AIOPS_CONFIG or ~/.config/aiops)")
    p.add_argument("--db", default=None, help="the workspace's DuckDB file (overrides [store] path)")
    p.add_argument("--listen", default=None, help="HOST:PORT of the HTTP endpoint (overrides [http] listen)")
    p.add_argument(
        "--node",
        default=None,
        help="this host's component name, any RFC 1123 host name (overrides [node] name; default: the host's "
        "own name); with --sim: serve that node's slice, "
        "or `facility`: the racks' sensors (/metrics/facility) and the DCIM caps (/api/dcim)",
    )
    p.add_argument(
        "--hostname",
        default=None,
        help="the host name this host goes by instead of the kernel's: [node.hosts] is looked up by it, the "
        "node is named after it by the usual rule, and it is the host's name in its scheduler and the "
        "Kubernetes API unless [scheduler] node_name is set (in a pod: the node's name, spec.nodeName)",
    )
    p.add_argument("--sim", default=None, metavar="SCENARIO", help="run against the twin of this scenario")
    p.add_argument(
        "--speed",
        type=positive_float(10_000.0),
        default=1.0,
        help="with --sim: simulated seconds per wall second",
    )
    p.add_argument("--lanes-policy", default=None, help="with --sim: the lanes policy the twin runs")
    p.add_argument(
        "--epoch-ts-s",
        type=positive_float(4e9),
        default=None,
        help="with --sim: unix time of the twin's simulated second 0 (agents of one cluster share it)",
    )
    p.add_argument("--duration-s", type=seconds(), default=None, help="stop after this many wall seconds")
    p.set_defaults(func=run)


def configured(args: argparse.Namespace) -> Config:
    config = load_config(args.config)
    store = config.store.model_copy(update={"path": args.db}) if args.db else config.store
    if args.listen is not None:
        try:
            parse_listen(args.listen)
        except ValueError as exc:
            raise ConfigError("--listen", "listen", str(exc)) from None
    http = config.http.model_copy(update={"listen": args.listen}) if args.listen is not None else config.http
    hostname, scheduler = socket.gethostname(), config.scheduler
    if args.hostname is not None:
        hostname = given_hostname(args.hostname)
        if not scheduler.node_name:  # the scheduler and the Kubernetes API know the host by it too
            scheduler = scheduler.model_copy(update={"node_name": hostname})
    if args.sim and not config.node.name and hostname not in config.node.hosts:
        node = NodeConfig(name="node0", rack=config.node.rack)  # the twin's whole cluster: named as before
    else:
        node = node_of(config, hostname)
    if args.node == FACILITY and args.sim:  # the twin's racks and DCIM: no node<N> (Service names it)
        node = NodeConfig.model_construct(name=FACILITY, rack="", hosts={})
    elif args.node is not None:
        try:
            node = NodeConfig(name=args.node, rack=node.rack)
        except ValidationError as exc:
            raise ConfigError(
                "--node", "node", exc.errors()[0]["msg"].removeprefix("Value error, ")
            ) from None
    node = node.model_copy(update={"hosts": config.node.hosts})  # alerts name hosts: keep the whole map
    return config.model_copy(update={"store": store, "http": http, "node": node, "scheduler": scheduler})


def given_hostname(value: str) -> str:
    """`--hostname`, checked: a host name (any case; a pod's `$(NODE_NAME)` left unexpanded is refused here,
    not turned into a node's name)."""
    error = host_name_error(value.strip().lower())
    if error:
        raise ConfigError("--hostname", "hostname", f"'{value[:80]}' is no host name: {error}")
    return value.strip()


def token_of(config: Config) -> str:
    if config.http.token_file:
        try:
            return Path(config.http.token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(
                config.source, "http.token_file", f"cannot read: {exc.strerror or exc}"
            ) from None
    return config.http.token


def alert_token_of(config: Config) -> str:
    """`[alertmanager_in] token_file`'s token (never logged); empty, the route off, when the key is unset. A
    file that cannot be read or holds no token is an error (exit 2), not a route open to anyone."""
    path = config.alertmanager_in.token_file
    if not path:
        return ""
    key = "alertmanager_in.token_file"
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            config.source, key, f"cannot read: {getattr(exc, 'strerror', None) or type(exc).__name__}"
        ) from None
    if not token:
        raise ConfigError(config.source, key, "the file holds no token")
    return token


def console_enabled(config: Config) -> bool:
    """Whether `aiops run` serves the console (at `/` on `[http] listen`). `[console] listen` alone, the old
    way to ask for it on a port of its own, is refused: the service has one listener now, and moving the
    console silently could put it on an address it never listened on (0.0.0.0 instead of 127.0.0.1)."""
    section = config.console
    if "enabled" not in section.model_fields_set:
        if section.listen:
            raise ConfigError(
                config.source,
                "console.listen",
                "aiops run serves the console at / on [http] listen now, not on an address of its own",
                "[console] enabled = true (or false); listen is then only `aiops console serve`'s address",
            )
        return False
    if section.enabled and not config.http.listen:
        raise ConfigError(
            config.source,
            "console.enabled",
            "the console is served on [http] listen, which is empty",
            "an [http] listen address, or enabled = false",
        )
    return section.enabled


def served_console(config: Config, service: Service, *, dispatch: bool = False) -> ServedConsole:
    """The web console over the service's own hold on the workspace, for the service's listener; approved
    proposals run in the loop (`dispatch`: `aiops fleet`'s, sent to the node agents that act)."""
    from aiops.console.app import ConsoleOptions, create_app
    from aiops.console.server import ServedConsole
    from aiops.report.schedule import reports_dir

    options = ConsoleOptions(
        reports_dir=reports_dir(config.report, config.store.path),
        secure_cookies=config.console.secure_cookies,
        execute=False,
        dispatch=dispatch,
        idle_timeout_s=config.console.idle_timeout_s,
        max_age_s=config.console.max_age_s,
        agent=agent_config(config),
        oidc=config.console.oidc,
        grafana_url=config.console.grafana_url,
    )
    return ServedConsole(create_app(service.workspace, options))


def run(args: argparse.Namespace) -> int:
    config = configured(args)
    limit_arenas()  # before any thread starts (aiops/service/malloc.py)
    console = console_enabled(config)
    if not 0 < args.speed <= 1000:
        raise ConfigError("--speed", "speed", f"{args.speed:g} is out of range", "0 < speed <= 1000")
    sim = None
    if args.sim:
        from aiops.datapath.policy import load_policy  # the twin's models: not loaded on a host
        from aiops.scenarios import load_scenario

        policy = load_policy(args.lanes_policy) if args.lanes_policy else None
        scenario = load_scenario(args.sim)
        if args.node is not None:
            check_node(scenario, args.node)
        sim = SimSetup(scenario, policy, args.speed, node=args.node, epoch_ts_s=args.epoch_ts_s)
    elif args.epoch_ts_s is not None:
        raise ConfigError("--epoch-ts-s", "epoch_ts_s", "only a twin has an epoch", "--sim SCENARIO")
    logs.setup()
    service = Service(config, sim=sim, token=token_of(config), alert_token=alert_token_of(config))
    if console:
        service.companion = served_console(config, service)

    def stop(signum: int, frame: FrameType | None) -> None:
        service.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # the start's code (DuckDB opening and migrating the file, the first windows) back to the kernel, once
    start_up = threading.Timer(START_UP_S, release_start_up_code)
    start_up.daemon = True
    start_up.start()
    try:
        return service.run(args.duration_s)
    finally:
        start_up.cancel()
