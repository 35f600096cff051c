"""The outbound side of notifications, in one place: every sink the product tells people through (generic JSON
webhooks, Slack, Alertmanager, PagerDuty, Teams, the Slack app's messages, the ticket sink), the bodies each is
sent (pure functions of an `IncidentEvent`), the durable queue in the workspace, and the one transport, all over
`aiops.outbound` (no redirect, a byte cap, one deadline, one error type). docs/NOTIFY.md."""
