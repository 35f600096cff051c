"""A workspace put to work: the world its actions act on (the twin, this host's NVML, or nothing), the
guardrails desk over it, and the loops the commands and the service run (analysis with filing, approvals
that execute, DCIM rounds). Above the pipeline and the twin; below the CLI, the agent and the service.
"""
