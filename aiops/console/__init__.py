"""The web console (docs/CONSOLE.md): `create_app` (app.py) over a workspace, served by `aiops run` when
`[console] listen` is set, or by `aiops console serve`; accounts with `aiops console adduser`."""
