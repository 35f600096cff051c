"""The web console (docs/CONSOLE.md): `create_app` (app.py) over a workspace, served by `aiops run` at `/` on the
service's one listener when `[console] enabled = true`, or alone by `aiops console serve`; accounts with
`aiops console adduser`."""
