"""`aiops fleet --prometheus URL [--config FILE] [--db PATH] [--listen HOST:PORT]`: the analyst for a whole
cluster. The node agents' exports are read from Prometheus or VictoriaMetrics every scrape interval into the fleet's
own workspace (aiops/fleet/source.py), and the node's service runs on them: live detection kept across cycles and
restarts, diagnosis, remediation filed as proposals, notifications, reports, `/metrics`, `/api` and the console
for the whole cluster; proposals people approved with SSH signatures are dispatched to the node agent that acts
(aiops/fleet/dispatch.py), which checks the signatures itself. SIGTERM and SIGINT end it after a last flush (exit 0). See docs/FLEET.md.
"""

from __future__ import annotations

import argparse
import signal
from pathlib import Path
from types import FrameType

from aiops.cli.args import duration, seconds
from aiops.cli.fleet_view import shards_token
from aiops.cli.run import alert_token_of, console_enabled, served_console, token_of
from aiops.config import Config, NodeConfig, load_config, parse_listen
from aiops.errors import ConfigError
from aiops.fleet.dispatch import FleetDispatcher
from aiops.fleet.peer_pages import PeerPages
from aiops.fleet.source import FleetSetup, fleet_sources
from aiops.service import logs
from aiops.service.malloc import limit_arenas
from aiops.service.service import Service

FLEET_NAME = "fleet"  # the contract's component name of the whole cluster: the fleet service speaks as it


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("fleet", help="the cluster analyst: node agents' exports from Prometheus, live")
    p.add_argument("--prometheus", default=None, metavar="URL", help="Prometheus/VictoriaMetrics ([fleet])")
    p.add_argument("--config", default=None, help="TOML config (default: $AIOPS_CONFIG or ~/.config/aiops)")
    p.add_argument("--db", default=None, help="the fleet workspace's DuckDB file (overrides [store] path)")
    p.add_argument("--listen", default=None, help="HOST:PORT of the HTTP endpoint (overrides [http] listen)")
    p.add_argument("--step", type=duration(max_s=600.0), default=None, help="scrape interval (15s)")
    p.add_argument(
        "--lookback", type=duration(max_s=86_400.0), default=None, help="read at first start (10m)"
    )
    p.add_argument("--delay", type=duration(max_s=600.0), default=None, help="read this far behind now (5s)")
    p.add_argument("--selector", default=None, help='extra label matchers for every query, e.g. cluster="a"')
    p.add_argument("--bearer-token-file", default=None, help="file holding a bearer token for Prometheus")
    p.add_argument("--duration-s", type=seconds(), default=None, help="stop after this many wall seconds")
    p.set_defaults(func=run)


def configured(args: argparse.Namespace) -> Config:
    config = load_config(args.config)
    fleet = config.fleet.model_copy(
        update={
            key: value
            for key, value in (
                ("prometheus", args.prometheus),
                ("step_s", args.step),
                ("lookback_s", args.lookback),
                ("delay_s", args.delay),
                ("selector", args.selector),
                ("bearer_token_file", args.bearer_token_file),
            )
            if value is not None
        }
    )
    if not fleet.prometheus:
        raise ConfigError(
            config.source,
            "fleet.prometheus",
            "no Prometheus to read",
            "--prometheus URL or [fleet] prometheus",
        )
    if not fleet.prometheus.startswith(("http://", "https://")):
        raise ConfigError(
            "--prometheus", "prometheus", f"'{fleet.prometheus}' is not a URL", "http(s)://host:port"
        )
    if args.listen is not None:
        try:
            parse_listen(args.listen)
        except ValueError as exc:
            raise ConfigError("--listen", "listen", str(exc)) from None
    store = config.store.model_copy(update={"path": args.db}) if args.db else config.store
    http = config.http.model_copy(update={"listen": args.listen}) if args.listen is not None else config.http
    # a window holds at least one scrape of every series
    detection = config.detection.model_copy(update={"window_s": max(config.detection.window_s, fleet.step_s)})
    # the service speaks as the whole cluster (notifications, exports): not a node<N>, so not validated as one
    node = NodeConfig.model_construct(name=FLEET_NAME, rack="", hosts=config.node.hosts)
    return config.model_copy(
        update={"store": store, "http": http, "fleet": fleet, "detection": detection, "node": node}
    )


def _token_file(config: Config, key: str, path: str) -> str | None:
    if not path:
        return None
    try:
        return Path(path).read_text(encoding="utf-8").strip() or None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            config.source,
            f"fleet.{key}",
            f"cannot read: {getattr(exc, 'strerror', None) or type(exc).__name__}",
        ) from None


def bearer_token(config: Config) -> str | None:
    return _token_file(config, "bearer_token_file", config.fleet.bearer_token_file)


def node_token(config: Config) -> str:
    """The node agents' /api token ([fleet] node_token_file): approved proposals are dispatched with it."""
    return _token_file(config, "node_token_file", config.fleet.node_token_file) or ""


def run(args: argparse.Namespace) -> int:
    config = configured(args)
    limit_arenas()  # before any thread starts (aiops/service/malloc.py)
    console = console_enabled(config)
    setup = FleetSetup(config.fleet, bearer_token(config), config.facility)
    logs.setup()
    service = Service(
        config,
        token=token_of(config),
        alert_token=alert_token_of(config),
        sources=lambda store: fleet_sources(store, setup),
        dispatcher=FleetDispatcher(config.fleet, node_token(config), name=FLEET_NAME),
    )
    if console:
        service.companion = served_console(config, service, dispatch=True)
    peers = _peer_pages(config)
    if peers is not None:
        service.pager.arbiter = peers.apply

    def stop(signum: int, frame: FrameType | None) -> None:
        service.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if peers is not None:
        peers.start()
    try:
        return service.run(args.duration_s)
    finally:
        if peers is not None:
            peers.stop()


def _peer_pages(config: Config) -> PeerPages | None:
    """A shard that knows the other shards (`[fleet] shard` and `shards`) pages a condition they all see once
    between them (aiops/fleet/peer_pages.py); they are asked once a detection window."""
    if not config.fleet.shard or not set(config.fleet.shards) - {config.fleet.shard}:
        return None
    return PeerPages(
        config.fleet.shard,
        config.fleet.shards,
        shards_token(config),
        interval_s=config.detection.window_s,
    )
