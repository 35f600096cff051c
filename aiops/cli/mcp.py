"""`aiops mcp [--db PATH] [--transport stdio|http] [--listen 127.0.0.1:PORT] [--token-file F] [--files-root D]`:
the workspace to other agents over the Model Context Protocol (docs/MCP.md). Read tools and `propose`; no tool
approves or executes. stdio: the client starts this command and speaks on its stdin/stdout (nothing else is
written there); http: streamable HTTP at http://LISTEN/mcp, loopback unless a bearer token file is given."""

from __future__ import annotations

import argparse

from aiops.cli.configured import add_config_argument, add_db_argument, cli_config, configured_workspace

DEFAULT_LISTEN = "127.0.0.1:8765"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "mcp",
        help="serve the workspace to other agents over MCP (read tools and propose; never approve or execute)",
        description=__doc__,
    )
    add_config_argument(p)
    add_db_argument(p)
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio", help="default stdio")
    p.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        help=f"http: host:port (default {DEFAULT_LISTEN}; port 0 picks a free one, printed on stderr)",
    )
    p.add_argument(
        "--token-file",
        default=None,
        help="http: a file holding the bearer token every request must carry (required off loopback)",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="http: a DNS name clients reach this server by (IP addresses and localhost always pass)",
    )
    p.add_argument(
        "--files-root",
        action="append",
        default=[],
        metavar="DIR",
        help="a directory whose files the investigate tool may read (repeatable; default none: it refuses)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from aiops.mcpserver.files import resolve_roots
    from aiops.mcpserver.server import http_server, read_token, serve_http, serve_stdio, stderr_line
    from aiops.mcpserver.tools import McpTools
    from aiops.store.writable import prepare_file

    workspace = configured_workspace(args.db, cli_config(args)).require()
    if not workspace.memory:  # the propose tool files proposals and audit records into it
        prepare_file(
            workspace.path, "the workspace (the propose tool files proposals and audit records in it)"
        )
    tools = McpTools(workspace, resolve_roots(args.files_root))
    if args.transport == "stdio":
        serve_stdio(tools)
        return 0
    token = read_token(args.token_file) if args.token_file else None
    server = http_server(tools, args.listen, token, tuple(args.allowed_host))
    serve_http(server, lambda url: stderr_line(f"aiops mcp: serving streamable HTTP at {url}"))
    return 0
