"""`aiops fleet-view [--config FILE] [--shard NAME=URL ...] [--json] [--listen HOST:PORT]`: one view across the
shards of a sharded fleet (aiops/fleet/view.py, docs/FLEET.md "One view across shards"). Every shard's
`aiops fleet` is asked for its incidents and proposals (`[fleet] shards`, or `--shard`), all at once, each list
bounded; a condition two shards both see is shown once. A shard whose flush holds its workspace is shown with its
lists as read before (`stale`, `as_of_ts_s`), or as busy (since when) where it had nothing read to answer from. `--json` prints the view once; `--listen` serves it (`/` a page for people,
`/api/incidents` the JSON), asking the shards at each request.
"""

from __future__ import annotations

import argparse
import hmac
import json
import sys
from pathlib import Path
from typing import Any

from aiops.config import SHARD_NAME, Config, load_config, parse_listen
from aiops.errors import ConfigError
from aiops.service.forwarded import is_loopback

TIMEOUT_S = 10.0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("fleet-view", help="one view across fleet shards: incidents and plans once")
    p.add_argument("--config", default=None, help="TOML config (default: $AIOPS_CONFIG or ~/.config/aiops)")
    p.add_argument(
        "--shard",
        action="append",
        default=[],
        metavar="NAME=URL",
        help="a shard's fleet (adds to [fleet] shards)",
    )
    p.add_argument("--json", action="store_true", help="print the view once as JSON and exit")
    p.add_argument("--listen", default=None, help="HOST:PORT to serve the view on")
    p.set_defaults(func=run)


def shards_of(config: Config, given: list[str]) -> dict[str, str]:
    shards = dict(config.fleet.shards)
    for item in given:
        name, sep, url = item.partition("=")
        if not sep or not SHARD_NAME.fullmatch(name) or not url.startswith(("http://", "https://")):
            raise ConfigError("--shard", "shard", f"'{item[:80]}' is not NAME=URL", "a=http://fleet-a:9484")
        shards[name] = url
    if not shards:
        raise ConfigError(
            config.source, "fleet.shards", "no shard to read", "--shard NAME=URL or [fleet] shards"
        )
    return shards


def shards_token(config: Config) -> str | None:
    """The shards' /api bearer token ([fleet] shards_token_file): the view asks with it, and so do the shards
    each other (aiops/fleet/peer_pages.py)."""
    path = config.fleet.shards_token_file
    if not path:
        return None
    try:
        return Path(path).read_text(encoding="utf-8").strip() or None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(config.source, "fleet.shards_token_file", f"cannot read: {exc}") from None


def run(args: argparse.Namespace) -> int:
    from aiops.fleet.view import ask_shards, merge

    config = load_config(args.config)
    shards, token = shards_of(config, args.shard), shards_token(config)

    def view() -> dict[str, Any]:
        return merge(ask_shards(shards, token, TIMEOUT_S))

    if args.json or args.listen is None:
        json.dump(view(), sys.stdout, indent=1, default=str)
        sys.stdout.write("\n")
        return 0
    try:
        host, port = parse_listen(args.listen)
    except ValueError as exc:
        raise ConfigError("--listen", "listen", str(exc)) from None
    return _serve(view, host, port, token)


def allowed(client_host: str | None, authorization: str, token: str | None) -> bool:
    """As a shard's own /api: the shards' bearer token, or a client on loopback (no token configured: loopback
    only). The view shows what the shards' API shows, so it asks what they ask."""
    if token and hmac.compare_digest(authorization.encode(), f"Bearer {token}".encode()):
        return True
    return is_loopback(client_host)


def _serve(view: Any, host: str, port: int, token: str | None) -> int:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
    from starlette.routing import Route

    from aiops.fleet.view import render_html

    def refused(request: Request) -> Response | None:
        client = request.client.host if request.client is not None else None
        if allowed(client, request.headers.get("Authorization", ""), token):
            return None
        return JSONResponse({"error": "a bearer token is needed (or ask from this host)"}, status_code=401)

    def page(request: Request) -> Response:
        return refused(request) or HTMLResponse(render_html(view()))

    def incidents(request: Request) -> Response:
        return refused(request) or JSONResponse(json.loads(json.dumps(view(), default=str)))

    def health(request: Request) -> Response:
        return PlainTextResponse("ok\n")

    app = Starlette(routes=[Route("/", page), Route("/api/incidents", incidents), Route("/healthz", health)])
    uvicorn.run(app, host=host, port=port, log_level="warning", ws="none")
    return 0
