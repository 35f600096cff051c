"""A proposal's id as the agent derives it from its thread and action, apart from the LangGraph graph that files
most of them: `aiops mcp` files proposals with it too, and must not load LangGraph (about a CPU-second at every
start) for a hash."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def proposal_id(thread_id: str, action: dict[str, Any]) -> str:
    digest = hashlib.sha256((thread_id + json.dumps(action, sort_keys=True)).encode()).hexdigest()
    return "P-" + digest[:8]
