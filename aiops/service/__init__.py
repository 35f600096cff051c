"""The node service (`aiops run`): collect, ingest, detect and diagnose live, serve metrics and an API, notify.
One per workspace; the same code runs against a real host and against the twin (`aiops run --sim`)."""
