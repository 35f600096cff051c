"""The LLM agent (LangGraph + any OpenAI-compatible endpoint) and its offline twin, the deterministic analyst.

See docs/AGENT.md. Entry points: `aiops.agent.session.open_session(db)` for a chat session,
`aiops.agent.session.citation_rate(db, questions)` for the eval harness, `aiops.agent.config.agent_config_of(config, env)`.
Nothing is imported here: LangGraph and the OpenAI client load only where a chat runs (the node service and
the CLI's other commands never pay for them).
"""
