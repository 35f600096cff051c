"""`aiops console adduser|deluser|role|passwd|disable|enable|serve`: the web console's accounts, and the console
served alone (without the node service) over a workspace, on `--listen` or `[console] listen`. `aiops run` serves
it too, at `/` on the service's one listener, with `[console] enabled = true`. Passwords come from a prompt
(twice) or `--password-file` (its first line); there is no default account or password."""

from __future__ import annotations

import argparse
import getpass
import signal
import threading
from pathlib import Path
from types import FrameType

from aiops.cli.configured import (
    add_config_argument,
    add_db_argument,
    agent_config,
    cli_config,
    configured_workspace,
)
from aiops.config import SERVICE_MEMORY_LIMIT_MB, parse_listen
from aiops.errors import InputError
from aiops.store.writable import prepare_file
from aiops.text import markup, terminal

DEFAULT_LISTEN = "127.0.0.1:9485"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("console", help="the web console: accounts, or serve it without the service")
    verbs = p.add_subparsers(dest="console_command", metavar="VERB", required=True)
    add = verbs.add_parser("adduser", help="make a console account (or --replace its password)")
    add.add_argument("name", metavar="NAME", help="a person's name (approvers: as in [guardrails.approvers])")
    add.add_argument("--role", required=True, help="viewer, approver or admin")
    add_db_argument(add)
    add_config_argument(add)
    add.add_argument("--password-file", default=None, help="read the password from this file's first line")
    add.add_argument("--replace", action="store_true", help="set a new password or role for an account")
    add.set_defaults(func=run_adduser)
    delete = verbs.add_parser("deluser", help="remove a console account (never the last admin)")
    delete.add_argument("name", metavar="NAME")
    add_db_argument(delete)
    add_config_argument(delete)
    delete.set_defaults(func=run_deluser)
    role = verbs.add_parser("role", help="change a console account's role (never demote the last admin)")
    role.add_argument("name", metavar="NAME")
    role.add_argument("--role", required=True, help="viewer, approver or admin")
    add_db_argument(role)
    add_config_argument(role)
    role.set_defaults(func=run_role)
    passwd = verbs.add_parser("passwd", help="set a new password for a console account")
    passwd.add_argument("name", metavar="NAME")
    add_db_argument(passwd)
    add_config_argument(passwd)
    passwd.add_argument("--password-file", default=None, help="read the password from this file's first line")
    passwd.set_defaults(func=run_passwd)
    for verb, what in (
        ("disable", "stop a console account signing in (its sessions end)"),
        ("enable", "let a disabled console account sign in again"),
    ):
        toggle = verbs.add_parser(verb, help=what)
        toggle.add_argument("name", metavar="NAME")
        add_db_argument(toggle)
        add_config_argument(toggle)
        toggle.set_defaults(func=run_disable if verb == "disable" else run_enable)
    serve = verbs.add_parser(
        "serve", help="serve the console over a workspace (no collection; holds the file as `aiops run` does)"
    )
    add_db_argument(serve)
    serve.add_argument(
        "--listen", default=None, help=f"HOST:PORT (default: [console] listen or {DEFAULT_LISTEN})"
    )
    add_config_argument(serve)
    serve.set_defaults(func=run_serve)


def _password(args: argparse.Namespace) -> str:
    if args.password_file:
        try:
            lines = Path(args.password_file).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(args.password_file, "--password-file", f"cannot read: {exc}") from None
        return lines[0] if lines else ""
    first = getpass.getpass("password: ")
    if getpass.getpass("again: ") != first:
        raise InputError("prompt", "password", "the two passwords differ")
    return first


def cli_actor() -> str:
    """Who made an account change from the command line, for the audit row: `cli:<login name>`."""
    try:
        return f"cli:{getpass.getuser()}"[:80]
    except (KeyError, OSError):
        return "cli:unknown"


def run_adduser(args: argparse.Namespace) -> int:
    from aiops.console.accounts import Accounts, accounts_path, check_role
    from aiops.console.manage import add_account
    from guardrails.session_signing import ensure_key, key_path

    check_role(args.role)
    workspace = configured_workspace(args.db, cli_config(args)).require()
    accounts = Accounts(accounts_path(workspace.path))
    account = add_account(
        workspace, accounts, cli_actor(), args.name, args.role, _password(args), replace=args.replace
    )
    path = key_path(workspace.path)
    if path is not None:
        ensure_key(path)
    note = ""
    if account.may_decide and account.name not in cli_config(args).guardrails.approvers:
        note = f" (add {account.name} to [guardrails.approvers] for the guardrails to count their approvals)"
    terminal().print(f"console account {markup(account.name)} ({account.role}){markup(note)}")
    return 0


def run_deluser(args: argparse.Namespace) -> int:
    from aiops.console.accounts import Accounts, accounts_path
    from aiops.console.manage import delete_account

    workspace = configured_workspace(args.db, cli_config(args)).require()
    gone = delete_account(workspace, Accounts(accounts_path(workspace.path)), cli_actor(), args.name)
    terminal().print(f"{markup(gone.name)}: removed")
    return 0


def run_role(args: argparse.Namespace) -> int:
    from aiops.console.accounts import Accounts, accounts_path
    from aiops.console.manage import set_role

    workspace = configured_workspace(args.db, cli_config(args)).require()
    account = set_role(workspace, Accounts(accounts_path(workspace.path)), cli_actor(), args.name, args.role)
    terminal().print(f"console account {markup(account.name)} ({account.role})")
    return 0


def run_passwd(args: argparse.Namespace) -> int:
    from aiops.console.accounts import Accounts, accounts_path
    from aiops.console.manage import reset_password

    workspace = configured_workspace(args.db, cli_config(args)).require()
    account = reset_password(
        workspace, Accounts(accounts_path(workspace.path)), cli_actor(), args.name, _password(args)
    )
    terminal().print(f"console account {markup(account.name)}: new password")
    return 0


def run_serve(args: argparse.Namespace) -> int:
    from aiops.console.app import ConsoleOptions, create_app
    from aiops.console.server import ConsoleServer

    config = cli_config(args)
    listen = args.listen or config.console.listen or DEFAULT_LISTEN
    try:
        parse_listen(listen)
    except ValueError as exc:
        raise InputError("--listen", "listen", str(exc)) from None
    from aiops.service.owner import FileOwner, OwnedWorkspace

    configured_workspace(args.db, cli_config(args)).require()
    prepare_file(args.db, "the console's workspace (its service lock, sessions and decisions)")
    # held open as `aiops run` holds it (one holder per workspace; other commands borrow it through leases):
    # a page then costs its queries, not opening a multi-GB file
    owner = FileOwner(
        args.db,
        memory_limit_mb=config.store.memory_limit_mb or SERVICE_MEMORY_LIMIT_MB,
        guardrails=config.guardrails,
        scheduler=config.scheduler,
    )
    owner.start()
    workspace = OwnedWorkspace(owner)
    options = ConsoleOptions(
        secure_cookies=config.console.secure_cookies,
        idle_timeout_s=config.console.idle_timeout_s,
        max_age_s=config.console.max_age_s,
        agent=agent_config(config),
        oidc=config.console.oidc,
        grafana_url=config.console.grafana_url,
    )
    try:
        server = ConsoleServer(
            create_app(workspace, options),
            listen,
            allowed_hosts=tuple(config.http.allowed_hosts),
            trusted_proxies=tuple(config.http.trusted_proxies),
        )
    except BaseException:
        owner.close()
        raise
    stopping = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        server.start()
        print(f"console on http://{server.host}:{server.port}/ (holding {args.db})", flush=True)
        while not stopping.wait(0.5):
            pass
    finally:
        server.close()
        owner.close()
    return 0


def _set_disabled(args: argparse.Namespace, disabled: bool) -> int:
    from aiops.console.accounts import Accounts, accounts_path
    from aiops.console.manage import set_disabled

    workspace = configured_workspace(args.db, cli_config(args)).require()
    account = set_disabled(
        workspace, Accounts(accounts_path(workspace.path)), cli_actor(), args.name, disabled
    )
    terminal().print(f"console account {markup(account.name)}: {'disabled' if disabled else 'enabled'}")
    return 0


def run_disable(args: argparse.Namespace) -> int:
    return _set_disabled(args, True)


def run_enable(args: argparse.Namespace) -> int:
    return _set_disabled(args, False)
