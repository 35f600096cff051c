"""`aiops chat`: investigate in a REPL, with the LLM when one is configured and the analyst always.

Commands: a free question, /incidents, /actions, /approve ID, /reject ID REASON, /why ID, /help, /quit.
/approve and /reject are signed with your SSH key (--key FILE, else [guardrails] signing_key; a .pub uses the
ssh-agent), exactly as `aiops actions approve` signs; without a key they say so and name that command.
Questions carry $USER (a label, never authority). Everything lives in
the workspace (proposals from any source, the audit log, the twin of a simulated workspace), so pending
approvals survive restarts and other commands see them.
"""

from __future__ import annotations

import argparse
import getpass
import os
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from aiops.errors import AiopsError, GuardrailError
from aiops.text import markup, terminal
from guardrails.signing import SshSigner, configured_signer

if TYPE_CHECKING:  # the agent pulls in LangGraph: only `aiops chat` pays for that import
    from aiops.agent.session import AgentSession, Reply

HELP = (
    "ask anything, or: /incidents  /actions  /approve ID  /reject ID REASON  /why ID  /help  /quit\n"
    "nothing physical runs without your /approve; the model cannot approve anything"
)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("chat", help="investigate incidents in chat; approve or reject proposed actions")
    p.add_argument("--db", default="out/demo.duckdb", help="the workspace's DuckDB file")
    p.add_argument(
        "--key",
        default=None,
        help="your SSH key for /approve and /reject (default: [guardrails] signing_key)",
    )
    p.set_defaults(func=run)


def _clock(ts_s: Any) -> str:
    return datetime.fromtimestamp(float(ts_s), tz=UTC).strftime("%H:%M:%S") if ts_s else "-"


def run(args: argparse.Namespace) -> int:
    from aiops.agent.session import open_session

    user = os.environ.get("USER") or getpass.getuser()
    console = terminal()
    with open_session(args.db) as session:
        console.print(f"[bold]aiops chat[/] on [cyan]{markup(args.db)}[/] as [cyan]{markup(user)}[/]")
        console.print(f"LLM: {markup(session.config.describe())}")
        console.print(
            "twin: "
            + (
                "the workspace's simulated world (what-if previews, execution)"
                if session.world
                else "none (not a simulated workspace): no what-if; physical actions need a host actuator"
            )
        )
        for old in session.workspace.legacy_files():
            console.print(
                f"[dim]ignoring {markup(str(old))}: left by an older aiops, never read (delete it)[/]"
            )
        waiting = session.pending()
        if waiting:
            console.print(f"[yellow]{len(waiting)} action(s) waiting for approval[/] (/actions)")
        console.print(f"[dim]{markup(HELP, multiline=True)}[/]")
        while True:
            try:
                line = console.input("[bold]aiops>[/] ").strip()
            except EOFError:
                break
            if not line:
                continue
            if line in ("/quit", "/exit", "/q"):
                break
            try:
                handle(console, session, user, line, key=args.key)
            except AiopsError as exc:
                console.print(f"[bold red]error:[/] {markup(str(exc), multiline=True)}")
    return 0


def _signer(key: str | None, proposal_id: str) -> SshSigner:
    try:
        return configured_signer(key)
    except GuardrailError as exc:
        raise GuardrailError(
            exc.rule, f"{exc.detail}; or, in a shell: aiops actions approve {proposal_id[:80]} --key FILE"
        ) from None


def handle(console: Console, session: AgentSession, user: str, line: str, key: str | None = None) -> None:
    command, _, rest = line.partition(" ")
    rest = rest.strip()
    if command == "/help":
        console.print(markup(HELP, multiline=True))
    elif command == "/incidents":
        show_incidents(console, session)
    elif command == "/actions":
        show_actions(console, session.actions())
    elif command == "/approve":
        if not rest:
            raise AiopsError("usage: /approve ID")
        pid = rest.split()[0]
        show_reply(console, session.approve(pid, _signer(key, pid)))
    elif command == "/reject":
        pid, _, reason = rest.partition(" ")
        if not pid or not reason.strip():
            raise AiopsError("usage: /reject ID REASON")
        show_reply(console, session.reject(pid, _signer(key, pid), reason.strip()))
    elif command == "/why":
        if not rest:
            raise AiopsError("usage: /why ID")
        show_why(console, session.why(rest.split()[0]))
    elif command.startswith("/"):
        raise AiopsError(f"unknown command {command} (/help)")
    else:
        show_reply(console, session.ask(line, user))


def show_incidents(console: Console, session: AgentSession) -> None:
    rows = session.analyst.incidents_summary()
    if not rows:
        console.print("[green]No incident: the cluster looks healthy.[/]")
        return
    table = Table(title="incidents")
    for column in ("id", "opened", "severity", "title", "top hypothesis"):
        table.add_column(column)
    for r in rows:
        table.add_row(
            markup(r["incident_id"]),
            _clock(r["opened_ts_s"]),
            markup(r["severity"]),
            markup(r["title"]),
            markup(r["top_hypothesis"] or "-"),
        )
    console.print(table)


def show_actions(console: Console, actions: list[dict[str, Any]]) -> None:
    if not actions:
        console.print("No proposals yet.")
        return
    table = Table(title="proposed actions")
    for column in ("id", "status", "action", "target", "parameters", "risk", "approvals", "reason"):
        table.add_column(column)
    for a in actions:
        risk = "physical" if a.get("physical") else ("digital" if "physical" in a else "")
        approvals = a.get("approvals") or (
            ", ".join(a.get("reasons") or []) if a["status"] == "denied" else ""
        )
        table.add_row(
            markup(a["proposal_id"]),
            markup(a["status"]),
            markup(a["kind"]),
            markup(a["target"]),
            markup(str(a.get("parameters") or "")),
            risk,
            markup(approvals or a.get("note", "")),
            markup(a.get("reason", "")),
        )
    console.print(table)


def show_reply(console: Console, reply: Reply) -> None:
    if reply.note:
        console.print(f"[yellow]{markup(reply.note)}[/]")
    for failure in reply.failures:
        console.print(f"[bold red]LLM failed:[/] {markup(failure)} — the analyst's answer stands.")
    label = "agent" if reply.source == "llm" else "analyst"
    console.print(f"[bold]{label}:[/] {markup(reply.answer, multiline=True)}")
    for claim in reply.claims:
        style = {"verified": "green", "mismatch": "red", "unverifiable": "yellow"}.get(claim.status, "white")
        console.print(
            f"  [{style}]{claim.mark()} {markup(claim.status)}[/] {markup(claim.text)} [dim]({markup(claim.note)})[/]"
        )
    if reply.claims:
        console.print(f"  [dim]verified citations: {reply.citation_rate:.0%}[/]")
    show_llm_hypotheses(console, reply)
    if reply.source == "llm" and reply.analyst_text:
        first = reply.analyst_text.splitlines()[1:2]
        if first:
            console.print(f"[dim]analyst: {markup(first[0])}[/]")
    for pid, execution in reply.executions.items():
        if execution.get("ok"):
            detail = execution.get("result", {}).get("result", {}).get("detail", "")
            console.print(f"[green]executed {markup(pid)}[/]: {markup(str(detail))}")
        else:
            console.print(f"[red]not executed {markup(pid)}[/]: {markup(str(execution.get('error')))}")
    for pid, check in reply.verifications.items():
        console.print(
            f"[cyan]effect of {markup(pid)}[/] after {check['settle_s']:g} s: {markup(str(check['changed']))}"
        )
    if reply.proposals:
        show_actions(console, reply.proposals)
        if reply.waiting:
            console.print("[yellow]waiting for a person:[/] /approve ID or /reject ID REASON")


def show_llm_hypotheses(console: Console, reply: Reply) -> None:
    """The model's hypotheses, each marked verified (merged into the ranking), unverified or refused, and why."""
    style = {"verified": "green", "unverified": "yellow", "refused": "red"}
    for h in reply.llm_hypotheses:
        status = str(h.get("status", ""))
        console.print(
            f"  [{style.get(status, 'white')}]model hypothesis {markup(status)}[/] "
            f"{markup(str(h.get('root_cause')))} on {markup(str(h.get('component')))} "
            f"[dim]({markup(str(h.get('reason', '')))})[/]"
        )
    added = [h for h in reply.hypotheses if h.get("source") == "llm"]
    if added:
        ranking = ", ".join(f"#{i + 1} {h['root_cause']} on {h['component']} ({h['source']})"
                            for i, h in enumerate(reply.hypotheses[:5]))  # fmt: skip
        console.print(f"  [dim]ranking with verified model hypotheses: {markup(ranking)}[/]")


def show_why(console: Console, why: dict[str, Any]) -> None:
    p = why["proposal"]
    console.print(
        f"[bold]{markup(p['proposal_id'])}[/]: {markup(p['kind'])} → {markup(p['target'])} ({markup(p['status'])}, "
        f"from {markup(str(p.get('origin') or p.get('source')))})"
    )
    console.print(f"reason: {markup(p.get('reason', ''))}")
    for reason in p.get("reasons") or []:
        console.print(f"guardrail: {markup(reason)}")
    if why["reply"] is not None:
        console.print(f"asked: {markup(why['reply'].question)}")
        show_reply(console, why["reply"])
    for entry in why["log"]:
        console.print(
            f"[dim]{_clock(entry['ts_s'])} {markup(entry['kind'])} {markup(str(entry['payload'])[:200])}[/]"
        )
