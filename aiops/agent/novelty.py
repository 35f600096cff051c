"""What a chat has shown already, so each reply shows only what is new (issue 27: the offline chat reprinted
the whole incident after every answer). An answer is read as blocks: a line and the indented lines under it
(the incident's heading, its top hypothesis with the runners-up, its remediation, its next steps). A block shown
before, word for word, is left out and counted; a block that changed (a new action, a later "last seen") is
shown whole. Claims and proposals are left out when shown before with the same status. Pure: the chat keeps
one `Shown` per conversation; `/why` shows everything again and counts as shown."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiops.text import plural


def blocks(text: str) -> list[str]:
    """`text` as blocks: each line that is not indented, with the indented lines that follow it."""
    out: list[str] = []
    for line in text.splitlines():
        if out and line[:1].isspace():
            out[-1] += "\n" + line
        elif line.strip():
            out.append(line)
    return out


@dataclass
class Shown:
    blocks: set[str] = field(default_factory=set)
    claims: set[tuple[str, str]] = field(default_factory=set)
    proposals: set[tuple[str, str]] = field(default_factory=set)

    def fresh_text(self, text: str, about: str | None = None) -> str:
        """The blocks of `text` not shown before, and a line saying how many were left out."""
        found = blocks(text)
        new = [b for b in found if b not in self.blocks]
        self.blocks.update(found)
        if not found or len(new) == len(found):
            return text
        again = f"/why {about} shows it all again" if about else ""
        if not new:
            return f"Nothing new{' about ' + about if about else ''} since it was shown above" + (
                f": {again}." if again else "."
            )
        left = len(found) - len(new)
        were = "was" if left == 1 else "were"
        return (
            "\n".join(new)
            + f"\n({plural(left, 'part')} of this answer {were} shown above and left out"
            + (f"; {again}.)" if again else ".)")
        )

    def fresh_claims(self, claims: list[Any]) -> list[Any]:
        """Claims (`text`, `status`) not shown before with the same status."""
        out = [c for c in claims if (c.text, c.status) not in self.claims]
        self.claims.update((c.text, c.status) for c in claims)
        return out

    def fresh_proposals(self, proposals: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Proposals not shown before with the same status (a new one, or one approved since, is shown)."""
        key = [(str(p.get("proposal_id")), str(p.get("status"))) for p in proposals]
        out = [p for p, k in zip(proposals, key, strict=True) if k not in self.proposals]
        self.proposals.update(key)
        return out

    def remember(self, text: str, claims: list[Any], proposals: list[dict[str, Any]]) -> None:
        """Count a reply shown whole (`/why`) as shown."""
        self.fresh_text(text)
        self.fresh_claims(claims)
        self.fresh_proposals(proposals)
