"""`aiops plans list|show|propose`: the remediation plans of a workspace (one per incident, a ladder of steps,
least disruptive first), and a person asking for a waiting step now. A step is approved with ONE signature
over all its targets by `aiops actions approve STEP` (signed with --key, or `--signature FILE.sig` over the
file `aiops actions message STEP --out FILE` wrote); this module holds those step paths of `aiops actions`."""

from __future__ import annotations

import argparse
import getpass
import json
from pathlib import Path

from rich.console import Console

from aiops.cli.configured import add_config_argument, add_db_argument, cli_config, configured_workspace
from aiops.errors import InputError
from aiops.plans import PlanRecord, plans
from aiops.runtime.actions import StepDecision, approve_step, propose_step, step_to_sign_now
from aiops.store import Workspace
from aiops.store.writable import write_file
from aiops.text import markup, plural, terminal, when
from guardrails.pasted import PastedSignature
from guardrails.signing import configured_signer
from guardrails.step_message import step_message, targets_of


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("plans", help="remediation plans: one per incident, steps least disruptive first")
    verbs = p.add_subparsers(dest="plans_command", metavar="VERB", required=True)
    ls = verbs.add_parser("list", help="plans and the status of each step")
    add_db_argument(ls)
    add_config_argument(ls)
    ls.add_argument(
        "--status", default=None, help="only plans of this status (open, done, exhausted, superseded)"
    )
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=run_list)
    show = verbs.add_parser("show", help="one plan (or the plan of an incident): every step in full")
    show.add_argument("plan_id", metavar="PLAN|STEP|INCIDENT")
    add_db_argument(show)
    add_config_argument(show)
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=run_show)
    ask = verbs.add_parser("propose", help="propose a waiting step now (it files its targets as proposals)")
    ask.add_argument("step_id", metavar="STEP")
    add_db_argument(ask)
    add_config_argument(ask)
    ask.set_defaults(func=run_propose)


def _workspace(args: argparse.Namespace) -> Workspace:
    return configured_workspace(args.db, cli_config(args))


def _chosen(found: list[PlanRecord], wanted: str) -> list[PlanRecord]:
    """The plan named, or the plan holding the step named, or the plans of the incident named."""
    return (
        [p for p in found if p.plan_id == wanted]
        or [p for p in found if any(s.step_id == wanted for s in p.steps)]
        or [p for p in found if p.incident_id == wanted]
    )


def run_list(args: argparse.Namespace) -> int:
    with _workspace(args).require().read() as store:
        found = plans(store, status=args.status)
    if args.json:
        print(json.dumps([p.json() for p in found], indent=2))
        return 0
    console = terminal()
    if not found:
        console.print("no plans")
        return 0
    for p in found:
        steps = ", ".join(f"{s.step_no} {s.kind} {s.status}" for s in p.steps)
        console.print(
            f"{markup(p.plan_id)} {markup(p.status)} for {markup(p.incident_id)} "
            f"({markup(p.root_cause)} on {markup(p.component)}): {markup(steps)}",
            highlight=False,
        )
    console.print(f"{plural(len(found), 'plan')} (aiops plans show PLAN for one)")
    return 0


def print_plan(console: Console, p: PlanRecord) -> None:
    console.print(
        f"[bold]{markup(p.plan_id)}[/] {markup(p.status)}: {markup(p.root_cause)} on {markup(p.component)} "
        f"({markup(p.incident_id)}, filed {when(p.created_ts_s)}; {markup(p.note)})",
        highlight=False,
    )
    for s in p.steps:
        console.print(
            f"  step {s.step_no} [{markup(s.status)}] {markup(s.step_id)}: {markup(s.title)} ({s.risk})",
            highlight=False,
        )
        for label, text in (
            ("targets", ", ".join(s.targets)),
            ("proposals", ", ".join(s.proposal_ids)),
            ("effect", s.effect),
            ("cost", s.cost),
            ("rollback", s.rollback),
            ("verify", f"within {s.verify_within_s:g} s: {s.verify_expect}" if s.verify_within_s else ""),
            ("why (the analyst's text, not an instruction)", s.reason),
            ("status", s.note),
        ):
            if text:
                console.print(f"      {label}: {markup(text)}", highlight=False)


def run_show(args: argparse.Namespace) -> int:
    with _workspace(args).require().read() as store:
        found = _chosen(plans(store), args.plan_id)
    if not found:
        raise InputError(args.plan_id, "PLAN", "no such plan or incident with a plan", "aiops plans list")
    if args.json:
        print(json.dumps([p.json() for p in found] if len(found) > 1 else found[0].json(), indent=2))
        return 0
    console = terminal()
    for p in found:
        print_plan(console, p)
    return 0


def _who() -> str:
    """Who asked, for the audit (proposing needs no signature: approving it does)."""
    try:
        return f"cli:{getpass.getuser()}"[:64]
    except (OSError, KeyError):
        return "cli"


def run_propose(args: argparse.Namespace) -> int:
    pids = propose_step(_workspace(args).require(), args.step_id, _who())
    console = terminal()
    console.print(f"{markup(args.step_id)}: proposed ({markup(', '.join(pids))})")
    console.print(f"approve it with one signature: aiops actions approve {markup(args.step_id)} --key FILE")
    return 0


# -- the step paths of `aiops actions` ------------------------------------------------------------------------
def report_step(console: Console, decision: StepDecision) -> int:
    auth = decision.authorisation
    sid = markup(decision.step_id)
    console.print(f"{sid}: signed by {markup(auth.signed_by)}: {markup(auth.message)}")
    for pid, outcome in decision.outcomes.items():
        colour = "green" if outcome.ran else "red"
        console.print(f"  {markup(pid)}: [{colour}]{markup(outcome.status)}[/]: {markup(outcome.message)}")
    if decision.note:
        console.print(f"  {markup(decision.note)}")
    return 0 if all(o.ran for o in decision.outcomes.values()) else 1


def step_window(path: Path, step_id: str, text: str) -> tuple[float, float]:
    """The (ts, expiry) of the step message in `path`, which must be exactly what `aiops actions message STEP`
    wrote for this step (the signature is over those bytes)."""
    allowed = f"the file aiops actions message {step_id[:80]} --out FILE wrote, unchanged"
    try:
        fields = json.loads(text)
        window = (float(fields["ts_s"]), float(fields["expires_ts_s"]))
        rebuilt = step_message(
            step_id, ts_s=window[0], expires_ts_s=window[1], targets=targets_of(fields["targets"])
        )
    except (ValueError, KeyError, TypeError):
        raise InputError(str(path), "--message", "not a step's approval message", allowed) from None
    if fields.get("decision") != "approve_step" or fields.get("step_id") != step_id:
        raise InputError(str(path), "--message", "the approval message of another step or proposal", allowed)
    if rebuilt.decode("ascii") != text:
        raise InputError(
            str(path), "--message", "not the exact bytes signed (edited, or a newline added)", allowed
        )
    return window


def approve_step_cli(args: argparse.Namespace, message_text: str | None, signature: str | None) -> int:
    config = cli_config(args)
    place = configured_workspace(args.db, config).require()
    if signature is None:
        signer = configured_signer(args.key, config.guardrails)
        decision = approve_step(place, args.proposal_id, signer, execute=not args.no_execute)
        return report_step(terminal(), decision)
    message_path = Path(args.message or args.signature.removesuffix(".sig"))
    window = step_window(message_path, args.proposal_id, message_text or "")
    decision = approve_step(
        place, args.proposal_id, PastedSignature(signature), execute=not args.no_execute, signed_at=window
    )
    return report_step(terminal(), decision)


MESSAGE_OUT = "the approval message (--out)"
FIX_OUT = "give --out a file in a folder this user can write"


def write_step_message(args: argparse.Namespace) -> int:
    signing = step_to_sign_now(_workspace(args).require(), args.proposal_id)
    write_file(args.out, signing.message, MESSAGE_OUT, FIX_OUT)
    console = terminal()
    targets = ", ".join(f"{t.proposal_id} ({t.target})" for t in signing.targets)
    console.print(
        f"{markup(args.out)}: the approval of step {markup(args.proposal_id)} with its {len(signing.targets)} "
        f"target(s) {markup(targets)}, valid until {when(signing.expires_ts_s)}"
    )
    console.print(f"sign it: ssh-keygen -Y sign -n aiops-approval -f ~/.ssh/id_ed25519 {markup(args.out)}")
    console.print(
        f"then: aiops actions approve {markup(args.proposal_id)} --signature {markup(args.out)}.sig"
    )
    return 0
