"""`aiops actions list|show|approve|reject|execute`: the proposals of a workspace (whoever filed them: the demo,
an analysis, the chat, a DCIM round), and a person's decision on them. Approvals and rejections are signed
with the person's SSH key (--key FILE, else [guardrails] signing_key; a .pub uses the ssh-agent) and verified
against the allowed-signers file, which names the person (docs/SECURITY.md). Once enough people approved, the
proposal executes at once on the workspace's world, through the guardrails (`aiops.runtime.actions`).
`aiops actions message ID --out FILE` writes the approval message to sign elsewhere (`ssh-keygen -Y sign -n
aiops-approval -f KEY FILE`); `approve ID --signature FILE.sig` records that signature (guardrails/pasted.py):
on a fleet's workspace, the approval a node agent verifies again when the proposal is dispatched to it.
ID may be a plan step (`PL-1a2b3c4d.2`, aiops plans list): `approve STEP` then records ONE signature over the
step's message, which names every target (proposal id, action hash, component), and runs them all;
`message STEP --out FILE` writes that message (aiops/cli/plans.py)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table

from aiops.cli import actions_safety
from aiops.cli.configured import add_config_argument, add_db_argument, cli_config, configured_workspace
from aiops.cli.plans import FIX_OUT, MESSAGE_OUT, approve_step_cli, write_step_message
from aiops.errors import InputError
from aiops.plans import step as plan_step
from aiops.runtime.actions import Decision, approve, execute, reject, to_sign
from aiops.runtime.world import executors_here
from aiops.store import Store, Workspace
from aiops.store.writable import prepare_file, write_file
from aiops.text import fields_text, markup, plural, terminal, when
from guardrails.audit import read_rows
from guardrails.pasted import PastedSignature
from guardrails.proposal_desk import Guardrails
from guardrails.records import GuardrailRecords
from guardrails.routing import TICKET
from guardrails.signing import configured_signer, decision_message

KEY_HELP = (
    "your SSH key: a private key file, or a .pub the ssh-agent holds (default: [guardrails] signing_key)"
)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("actions", help="list, show, approve or reject proposed actions")
    verbs = p.add_subparsers(dest="actions_command", metavar="VERB", required=True)
    ls = verbs.add_parser("list", help="proposals and their state")
    add_db_argument(ls)
    add_config_argument(ls)
    ls.add_argument("--status", default=None, help="only this status (pending, approved, denied, ...)")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=run_list)
    show = verbs.add_parser("show", help="one proposal: action, verdict, approvals, audit trail")
    show.add_argument("proposal_id", metavar="ID")
    add_db_argument(show)
    add_config_argument(show)
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=run_show)
    approve = verbs.add_parser(
        "approve",
        help="approve a proposal, or a plan step with all its targets (one signature with your key); runs it once authorised",
    )
    approve.add_argument("proposal_id", metavar="ID|STEP")
    approve.add_argument("--key", default=None, help=KEY_HELP)
    add_db_argument(approve)
    add_config_argument(approve)
    approve.add_argument("--no-execute", action="store_true", help="record the approval only")
    approve.add_argument(
        "--signature",
        default=None,
        metavar="FILE",
        help="a signature made with ssh-keygen -Y sign over the file `aiops actions message` wrote",
    )
    approve.add_argument(
        "--message", default=None, metavar="FILE", help="the signed message file (default: FILE without .sig)"
    )
    approve.set_defaults(func=run_approve)
    message = verbs.add_parser(
        "message", help="write the approval message of a proposal or a plan step, to sign with ssh-keygen"
    )
    message.add_argument("proposal_id", metavar="ID|STEP")
    message.add_argument("--out", required=True, metavar="FILE", help="where the exact bytes to sign go")
    add_db_argument(message)
    add_config_argument(message)
    message.set_defaults(func=run_message)
    execute = verbs.add_parser("execute", help="run a digital proposal, or one people already approved")
    execute.add_argument("proposal_id", metavar="ID")
    add_db_argument(execute)
    add_config_argument(execute)
    execute.set_defaults(func=run_execute)
    reject = verbs.add_parser("reject", help="reject a proposal")
    reject.add_argument("proposal_id", metavar="ID")
    reject.add_argument("--key", default=None, help=KEY_HELP)
    reject.add_argument("--reason", required=True)
    add_db_argument(reject)
    add_config_argument(reject)
    reject.set_defaults(func=run_reject)
    actions_safety.register(verbs)  # breaker, override (aiops/cli/actions_safety.py)


def _workspace(args: argparse.Namespace) -> Workspace:
    """The workspace under the command's config (its guardrails: approvers, allowed signers, witness)."""
    return configured_workspace(args.db, cli_config(args))


def _clock(ts_s: float) -> str:
    return when(ts_s)


def _is_step(args: argparse.Namespace) -> bool:
    """Whether the ID given names a plan step of the workspace (else it is a proposal's)."""
    with _workspace(args).require().read() as store:
        return plan_step(store, args.proposal_id) is not None


def dispatched_to(store: Store) -> dict[str, str]:
    """Proposal id -> `node:<host>` for the proposals a fleet sent to a node agent (the node executes them, not
    a ticket): from the fleet's own `dispatch` and `dispatch_result` audit events."""
    out: dict[str, str] = {}
    for row in read_rows(store, event="dispatch"):
        out.setdefault(row.proposal_id, f"node:{str(row.data().get('node', '?'))[:64]}")
    for row in read_rows(store, event="dispatch_result"):
        out[row.proposal_id] = f"node:{str(row.data().get('node', '?'))[:64]}"
    return out


def run_list(args: argparse.Namespace) -> int:
    with _workspace(args).require().read() as store:
        book = GuardrailRecords(store)
        records = book.proposals(args.status)
        approvals = {r.action.proposal_id: book.approvals(r.action.proposal_id) for r in records}
        executors = {r.proposal_id: executors_here(store).get(r.action.kind, TICKET) for r in records}
        executors.update({k: v for k, v in dispatched_to(store).items() if k in executors})
    if args.json:
        rows = [
            {
                "proposal_id": r.action.proposal_id,
                "kind": r.action.kind,
                "target": r.action.target,
                "parameters": r.action.parameters,
                "status": r.status,
                "physical": r.physical,
                "approvals_needed": r.approvals_needed,
                "executor": executors[
                    r.proposal_id
                ],  # "ticket": nothing here executes it; node:<host>: sent there
                "step_id": r.step_id,
                "approvers": sorted({a.approver for a in approvals[r.action.proposal_id]}),
                "message": r.message,
                "proposed_by": r.action.proposed_by,
                "origin": r.origin,
                "incident_id": r.incident_id,
                "expires_ts_s": r.expires_ts_s,
            }
            for r in records
        ]
        print(json.dumps(rows, indent=2))
        return 0
    console = terminal()
    if not records:
        console.print("no proposals")
        return 0
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)  # fits 80 columns: nothing cut, long cells fold
    table.add_column("id", no_wrap=True)  # the id to approve must stay whole, whatever the width
    for column in ("status", "kind", "target", "risk", "approvals", "executor", "step"):
        table.add_column(column, overflow="fold")
    for r in records:
        people = sorted({a.approver for a in approvals[r.action.proposal_id]})
        table.add_row(
            markup(r.action.proposal_id),
            markup(r.status),
            markup(r.action.kind),
            markup(r.action.target),
            "physical" if r.physical else "digital",
            f"{len(people)}/{r.approvals_needed}",
            markup(executors[r.proposal_id]),
            markup(r.step_id or "-"),
        )
    console.print(table)
    for r in records:  # who proposed it, from where, and the guardrails' verdict: on a line of their own
        console.print(
            f"  {markup(r.action.proposal_id)}: proposed by {markup(r.action.proposed_by)} from "
            f"{markup(r.origin or '-')}; verdict: {markup(r.message)}"
        )
    console.print(f"{plural(len(records), 'proposal')} (aiops actions show ID for one)")
    return 0


def run_show(args: argparse.Namespace) -> int:
    with _workspace(args).require().read() as store:
        shown = Guardrails(store).show(args.proposal_id)
    if args.json:
        print(json.dumps(shown, indent=2, default=str))
        return 0
    console = terminal()
    action = shown["action"]
    console.print(
        f"[bold]{markup(action['proposal_id'])}[/] {markup(action['kind'])} on {markup(action['target'])}"
    )
    console.print(f"parameters: {markup(fields_text(action['parameters']) or '-')}")
    console.print(
        f"risk: {'physical' if shown['physical'] else 'digital'}; "
        f"approvals needed: {shown['approvals_needed']}"
    )
    console.print(f"status: {markup(shown['status'])} ({markup(shown['message'])})")
    console.print(f"proposed by {markup(action['proposed_by'])} at {_clock(action['created_ts_s'])}")
    console.print("reason (proposer's text, not an instruction): " + markup(action["reason"] or "-"))
    for evidence in action["evidence"]:
        console.print(f"  evidence: {markup(evidence)}")
    if action["expected_effect"]:
        console.print(f"expected effect: {markup(action['expected_effect'])}")
    console.print(f"rollback: {markup(json.dumps(action['rollback']))}")
    console.print(f"action hash: {markup(shown['action_hash'])}")
    for a in shown["approvals"]:
        console.print(
            f"  approved by {markup(a['approver'])} at {_clock(a['ts_s'])}, "
            f"expires {_clock(a['expires_ts_s'])}"
        )
    if shown["execution"]:
        console.print(
            f"execution: {markup(shown['execution']['status'])} at {_clock(shown['execution']['ts_s'])}"
        )
    for row in shown["audit"]:
        console.print(f"  audit #{row['seq']} {markup(row['event'])} by {markup(row['actor'])}")
    return 0


def _report(console: Console, decision: Decision) -> int:
    pid = markup(decision.proposal_id)
    auth = decision.authorisation
    if auth is not None and auth.ok:
        console.print(f"{pid}: approved ({markup(auth.message)})")
    outcome = decision.outcome
    if outcome is None:
        console.print(f"{pid}: {markup(decision.note)}")
        return 1 if decision.ticket else 0
    if outcome.ran:
        detail = json.dumps(outcome.result.get("detail", {}), sort_keys=True, default=str)
        console.print(f"{pid}: [green]executed[/] on the workspace's world: {markup(detail)}")
        return 0
    console.print(f"{pid}: [red]{markup(outcome.status)}[/]: {markup(outcome.message)}")
    return 1


def run_approve(args: argparse.Namespace) -> int:
    if _is_step(args):
        if args.signature is None:
            return approve_step_cli(args, None, None)
        message = _read(Path(args.message or args.signature.removesuffix(".sig")), "--message", 64 * 1024)
        return approve_step_cli(args, message, _read(Path(args.signature), "--signature", 8192))
    config = cli_config(args)
    place = configured_workspace(args.db, config).require()
    if args.signature is None:
        signer = configured_signer(args.key, config.guardrails)
        decision = approve(place, args.proposal_id, signer, execute=not args.no_execute)
        return _report(terminal(), decision)
    signature_path = Path(args.signature)
    message_path = Path(args.message or (args.signature.removesuffix(".sig")))
    window = signed_window(message_path, args.proposal_id)
    pasted = PastedSignature(_read(signature_path, "--signature", 8192))
    decision = approve(place, args.proposal_id, pasted, execute=not args.no_execute, signed_at=window)
    return _report(terminal(), decision)


def _read(path: Path, flag: str, limit: int) -> str:
    try:
        text = path.read_bytes()[: limit + 1].decode("ascii")
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or "not ASCII text"
        raise InputError(str(path), flag, f"cannot read: {why}") from None
    if len(text) > limit:
        raise InputError(str(path), flag, f"larger than {limit} bytes")
    return text


def signed_window(path: Path, proposal_id: str) -> tuple[float, float]:
    """The (ts, expiry) of the approval message in `path`, which must be exactly what `aiops actions message`
    wrote for this proposal (the signature is over those bytes)."""
    text = _read(path, "--message", 4096)
    allowed = f"the file aiops actions message {proposal_id[:80]} --out FILE wrote, unchanged"
    try:
        fields = json.loads(text)
        window = (float(fields["ts_s"]), float(fields["expires_ts_s"]))
        rebuilt = decision_message(
            "approve",
            ts_s=window[0],
            expires_ts_s=window[1],
            proposal_id=proposal_id,
            action_hash=str(fields["action_hash"]),
        )
    except (ValueError, KeyError, TypeError):
        raise InputError(str(path), "--message", "not an approval message", allowed) from None
    if fields.get("decision") != "approve" or fields.get("proposal_id") != proposal_id:
        raise InputError(str(path), "--message", "the approval message of another proposal", allowed)
    if rebuilt.decode("ascii") != text:
        raise InputError(
            str(path), "--message", "not the exact bytes signed (edited, or a newline added)", allowed
        )
    return window


def run_message(args: argparse.Namespace) -> int:
    prepare_file(args.out, MESSAGE_OUT, FIX_OUT)  # said before anything is read, never after
    if _is_step(args):
        return write_step_message(args)
    signing = to_sign(_workspace(args).require(), args.proposal_id)
    write_file(args.out, signing.message, MESSAGE_OUT, FIX_OUT)
    console = terminal()
    console.print(
        f"{markup(args.out)}: the approval of {markup(args.proposal_id)}, valid until {_clock(signing.expires_ts_s)}"
    )
    console.print(f"sign it: ssh-keygen -Y sign -n aiops-approval -f ~/.ssh/id_ed25519 {markup(args.out)}")
    console.print(
        f"then: aiops actions approve {markup(args.proposal_id)} --signature {markup(args.out)}.sig"
    )
    return 0


def run_execute(args: argparse.Namespace) -> int:
    return _report(terminal(), execute(_workspace(args).require(), args.proposal_id))


def run_reject(args: argparse.Namespace) -> int:
    config = cli_config(args)
    signer = configured_signer(args.key, config.guardrails)
    reject(configured_workspace(args.db, config).require(), args.proposal_id, signer, args.reason)
    terminal().print(f"{markup(args.proposal_id)}: rejected")
    return 0
