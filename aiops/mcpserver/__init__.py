"""`aiops mcp`: the workspace served to other agents over the Model Context Protocol (docs/MCP.md): read tools
(incidents, hypotheses with evidence, a component's state, evidence files, a report, proposals) and `propose`,
answered as plain JSON data (`tools.py`), on stdio or streamable HTTP (`server.py`), files confined to the
operator's roots (`files.py`). No tool approves or executes."""
