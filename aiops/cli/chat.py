"""`aiops chat`: investigate in a REPL, with the LLM when one is configured and the analyst always.

Commands: a free question, /incidents, /actions, /approve ID, /reject ID REASON, /why P-…|INC-…, /help, /quit.
Without an LLM the analyst answers on-call's questions (what is wrong, which jobs are affected, what to do now,
what changed when, is a rack/node/GPU/job OK) and questions about incidents from stored rows.
/approve and /reject are signed with your SSH key (--key FILE, else [guardrails] signing_key; a .pub uses the
ssh-agent), exactly as `aiops actions approve` signs; without a key they say so and name that command.
Questions carry $USER (a label, never authority). Everything lives in
the workspace (proposals from any source, the audit log, the twin of a simulated workspace), so pending
approvals survive restarts and other commands see them.
"""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import os
import re
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.table import Table

from aiops.agent.novelty import Shown
from aiops.cli.configured import add_config_argument, add_db_argument, agent_config, cli_config
from aiops.cli.render import row_text
from aiops.config import GuardrailsConfig
from aiops.errors import AiopsError, GuardrailError
from aiops.models import INCIDENT_ID_PATTERN
from aiops.text import fields_text, markup, plural, terminal, when
from guardrails.signing import SshSigner, configured_signer

if TYPE_CHECKING:  # the agent pulls in LangGraph: only `aiops chat` pays for that import
    from aiops.agent.session import AgentSession, Reply

HELP = (
    "ask what's wrong, which jobs are affected, what should I do,\n"
    "what changed in the last hour (since 9am, today), is rack1 ok (a node,\n"
    "node3/gpu5, job llm), or about an incident (INC-…)\n"
    "/incidents /actions /approve ID /reject ID REASON /why P-…|INC-… /help /quit\n"
    "nothing physical runs without your /approve; the model cannot approve anything"
)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("chat", help="investigate incidents in chat; approve or reject proposed actions")
    add_db_argument(p)
    p.add_argument(
        "--key",
        default=None,
        help="your SSH key for /approve and /reject (default: [guardrails] signing_key)",
    )
    add_config_argument(p)
    p.set_defaults(func=run)


INCIDENT = re.compile(rf"^{INCIDENT_ID_PATTERN}$", re.IGNORECASE)


def _when(ts_s: Any) -> str:
    return when(float(ts_s)) if isinstance(ts_s, int | float) and not isinstance(ts_s, bool) else "-"


def _identity(user: str, key: str | None, guardrails: GuardrailsConfig) -> str:
    """Who the chat says you are: $USER labels questions only; what counts is the key /approve signs with."""
    try:
        signer = configured_signer(key, guardrails)
        signs = f"/approve and /reject sign with {markup(str(signer.key))}"
    except GuardrailError:
        signs = markup("no signing key: /approve and /reject need --key FILE or [guardrails] signing_key")
    return f"questions labelled [cyan]{markup(user)}[/] (a label, not authority); {signs}"


def run(args: argparse.Namespace) -> int:
    from aiops.agent.session import open_session

    user = os.environ.get("USER") or getpass.getuser()
    console = terminal()
    config = cli_config(args)
    with open_session(args.db, config=agent_config(config), guardrails=config.guardrails) as session:
        identity = _identity(user, args.key, config.guardrails)
        console.print(f"[bold]aiops chat[/] on [cyan]{markup(args.db)}[/]: {identity}")
        console.print(f"LLM: {markup(session.config.describe())}")
        console.print(
            "twin: "
            + (
                "the workspace's simulated world (execution; what-if previews from its stored telemetry)"
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
            console.print(f"[yellow]{plural(len(waiting), 'action')} waiting for approval[/] (/actions)")
        console.print(f"[dim]{markup(HELP, multiline=True)}[/]")
        shown = Shown()  # what this conversation has shown: each answer shows only what is new
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
                handle(console, session, user, line, key=args.key, shown=shown)
            except AiopsError as exc:
                console.print(f"[bold red]error:[/] {markup(str(exc), multiline=True)}")
    return 0


def _signer(key: str | None, proposal_id: str, guardrails: GuardrailsConfig) -> SshSigner:
    try:
        return configured_signer(key, guardrails)
    except GuardrailError as exc:
        raise GuardrailError(
            exc.rule, f"{exc.detail}; or, in a shell: aiops actions approve {proposal_id[:80]} --key FILE"
        ) from None


def handle(
    console: Console,
    session: AgentSession,
    user: str,
    line: str,
    key: str | None = None,
    shown: Shown | None = None,
) -> None:
    """One line of the chat. `shown`: what the conversation has shown, so an answer shows only what is new
    (`/why` shows everything again)."""
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
        show_reply(console, session.approve(pid, _signer(key, pid, session.workspace.guardrails)))
    elif command == "/reject":
        pid, _, reason = rest.partition(" ")
        if not pid or not reason.strip():
            raise AiopsError("usage: /reject ID REASON")
        show_reply(
            console, session.reject(pid, _signer(key, pid, session.workspace.guardrails), reason.strip())
        )
    elif command == "/why":
        if not rest:
            raise AiopsError("usage: /why ID (a proposal P-... or an incident INC-...)")
        wanted = rest.split()[0]
        if INCIDENT.match(wanted):
            reply = session.why_incident(wanted)
            show_reply(console, reply, rows=True)
            if shown is not None:  # shown whole: the next answer need not repeat it
                shown.remember(reply.answer, reply.claims, reply.proposals)
        else:
            show_why(console, session.why(wanted))
    elif command.startswith("/"):
        raise AiopsError(f"unknown command {command} (/help)")
    else:
        reply = session.ask(line, user)
        if shown is not None:
            fresh = shown.fresh_proposals(reply.proposals)
            reply = dataclasses.replace(
                reply,
                answer=shown.fresh_text(reply.answer, reply.incident_id),
                claims=shown.fresh_claims(reply.claims),
                proposals=fresh,
                note=_joined(reply.note, _unchanged_note([p for p in reply.proposals if p not in fresh])),
            )
        show_reply(console, reply)


def _unchanged_note(hidden: list[dict[str, Any]]) -> str:
    """One line for the proposals left out as shown before: their ids, so a repeated question still says what
    it found (and that nothing new was filed) without reprinting them."""
    if not hidden:
        return ""
    ids = ", ".join(f"{p.get('proposal_id')} ({p.get('status')})" for p in hidden)
    if any(p.get("existing") for p in hidden):
        return f"already proposed, unchanged since shown above: {ids}; nothing new filed"
    return f"shown above, unchanged: {ids}"


def _joined(*notes: str) -> str:
    return " ".join(n for n in notes if n)


def show_incidents(console: Console, session: AgentSession) -> None:
    rows = session.analyst.incidents_summary()
    if not rows:
        console.print("[green]No incident: the cluster looks healthy.[/]")
        return
    table = Table(title="incidents", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("id", no_wrap=True)  # the id to ask /why about stays whole, whatever the width
    table.add_column("opened", overflow="fold")
    for column in ("severity", "title", "top hypothesis"):
        table.add_column(column, overflow="fold")
    for r in rows:
        table.add_row(
            markup(r["incident_id"]),
            _when(r["opened_ts_s"]),
            markup(r["severity"]),
            markup(r["title"]),
            markup(r["top_hypothesis"] or "-"),
        )
    console.print(table)


def show_actions(console: Console, actions: list[dict[str, Any]]) -> None:
    """The proposals as a table that fits 80 columns with every id whole (the one to /approve), then each
    one's reason and notes on its own lines."""
    if not actions:
        console.print("No proposals yet.")
        return
    table = Table(title="proposed actions")
    table.add_column("id", no_wrap=True)
    for column in ("status", "action", "target", "risk", "approvals"):
        table.add_column(column, overflow="fold")
    for a in actions:
        risk = "physical" if a.get("physical") else ("digital" if "physical" in a else "")
        params = f" ({fields_text(a['parameters'])})" if a.get("parameters") else ""
        approvers = a.get("approvers") or []
        needed = a.get("approvals_needed")
        approvals = f"{len(approvers)}/{needed}" if isinstance(needed, int) and needed else "-"
        table.add_row(
            markup(a["proposal_id"]),
            markup(a["status"]),
            markup(a["kind"]),
            markup(f"{a['target']}{params}"),
            risk,
            approvals,
        )
    console.print(table)
    for a in actions:
        notes = [a.get("reason", "")]
        if a["status"] == "denied":
            notes.append(
                "refused by the guardrails: " + "; ".join(a.get("reasons") or [a.get("message", "")])
            )
        elif a.get("note"):
            notes.append(str(a["note"]))
        if a.get("existing"):
            since = f" since {_when(a['created_ts_s'])}" if a.get("created_ts_s") else ""
            notes.append(f"already proposed ({a['status']}{since}): nothing new filed")
        console.print(f"  {markup(a['proposal_id'])}: {markup('; '.join(n for n in notes if n))}")


def show_reply(console: Console, reply: Reply, *, rows: bool = False) -> None:
    if reply.note:
        console.print(f"[yellow]{markup(reply.note)}[/]")
    for failure in reply.failures:
        console.print(f"[bold red]LLM failed:[/] {markup(failure)} — the analyst's answer stands.")
    label = "agent" if reply.source == "llm" else "analyst"
    if reply.answer:
        console.print(f"[bold]{label}:[/] {markup(reply.answer, multiline=True)}")
    for claim in reply.claims:
        style = {"verified": "green", "mismatch": "red", "unverifiable": "yellow"}.get(claim.status, "white")
        console.print(
            f"  [{style}]{claim.mark()} {markup(claim.status)}[/] {markup(claim.text)} [dim]({markup(claim.note)})[/]"
        )
        values = claim.citation.values if claim.citation else []
        if rows and values and isinstance(values[0], dict):
            console.print(f"    [dim]{markup(row_text(values[0]))}[/]")
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
            console.print(f"[green]executed {markup(pid)}[/]: {markup(fields_text(detail))}")
        else:
            console.print(f"[red]not executed {markup(pid)}[/]: {markup(str(execution.get('error')))}")
    for pid, check in reply.verifications.items():
        console.print(
            f"[cyan]effect of {markup(pid)}[/] after {check['settle_s']:g} s: {markup(effect_text(check['changed']))}"
        )
    if reply.proposals:
        show_actions(console, reply.proposals)
        if reply.waiting:
            console.print("[yellow]waiting for a person:[/] /approve ID or /reject ID REASON")


def effect_text(changed: Any) -> str:
    """`{"temp_c": [90.0, 61.2]}` as `temp_c 90 -> 61.2`; nothing changed says so."""
    if not isinstance(changed, dict) or not changed:
        return "no metric changed"
    parts = []
    for name, values in list(changed.items())[:12]:
        if isinstance(values, list) and len(values) == 2:
            before, after = (fields_text(v) if isinstance(v, dict) else _number(v) for v in values)
            parts.append(f"{name} {before} -> {after}")
        else:
            parts.append(f"{name} {fields_text(values)}")
    return ", ".join(parts)


def _number(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


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
        ranking = ", ".join(
            f"#{i + 1} {h['root_cause']} on {h['component']} ({h['source']})"
            for i, h in enumerate(reply.hypotheses[:5])
        )
        console.print(f"  [dim]ranking with verified model hypotheses: {markup(ranking)}[/]")


def show_why(console: Console, why: dict[str, Any]) -> None:
    p = why["proposal"]
    params = f" ({fields_text(p['parameters'])})" if p.get("parameters") else ""
    console.print(
        f"[bold]{markup(p['proposal_id'])}[/]: {markup(p['kind'])} {markup(p['target'])}{markup(params)} "
        f"({markup(p['status'])}, from {markup(str(p.get('origin') or p.get('source')))})"
    )
    console.print(f"reason: {markup(p.get('reason', ''))}")
    for reason in p.get("reasons") or []:
        console.print(f"guardrail: {markup(reason)}")
    if why["reply"] is not None:
        console.print(f"asked: {markup(why['reply'].question)}")
        show_reply(console, why["reply"])
    for entry in why["log"]:
        console.print(f"[dim]{_when(entry['ts_s'])} {markup(entry['kind'])}: {markup(log_text(entry))}[/]")


def log_text(entry: dict[str, Any]) -> str:
    """One journal entry as a sentence: the fields that matter for its kind, never a dict cut mid-word."""
    payload = entry.get("payload")
    if not isinstance(payload, dict):
        return str(payload)[:300]
    kind = entry.get("kind")
    if kind == "question":
        return f"{payload.get('asked_by') or 'someone'} asked {str(payload.get('question'))[:200]!r}"
    if kind == "proposal":
        params = f" ({fields_text(payload['parameters'])})" if payload.get("parameters") else ""
        verdict = (
            "allowed" if payload.get("allowed") else "refused: " + "; ".join(payload.get("reasons") or [])
        )
        again = ", already proposed: nothing new filed" if payload.get("existing") else ""
        return f"{payload.get('kind')} {payload.get('target')}{params}, {verdict}{again}"
    if kind in ("approval", "rejection"):
        said = payload.get("message") or payload.get("reason") or ""
        return f"by {payload.get('by')}: {said}"[:300]
    if kind == "execution":
        if payload.get("ok"):
            return "executed: " + fields_text(
                (payload.get("result") or {}).get("result", {}).get("detail", "")
            )
        return f"not executed: {payload.get('error')}"
    if kind == "verification":
        return f"after {payload.get('settle_s')} s: {effect_text(payload.get('changed'))}"
    if kind == "answer":
        return f"{payload.get('source')} answered, verified citations {float(payload.get('citation_rate') or 0):.0%}"
    if kind == "report":
        counts = payload.get("proposals") or {}
        return ", ".join(f"{n} {status}" for status, n in counts.items()) if isinstance(counts, dict) else ""
    text = fields_text(payload)
    return text if len(text) <= 300 else text[:297] + "…"
