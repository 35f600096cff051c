"""Which client a request came from, behind a reverse proxy (`[http] trusted_proxies`).

uvicorn's own proxy handling trusts `X-Forwarded-For` from 127.0.0.1 by default: any local user could then
claim any client address (the console's per-address sign-in limits were sprayed that way), and a value that is
no address (`X-Forwarded-For: not-an-ip`) became the client's "host" and a 500 where it was parsed. Here:
- `X-Forwarded-For` counts only when the connection comes from an address in `[http] trusted_proxies` (IP
  addresses or networks; none by default): the client is the right-most address in it that is not itself a
  trusted proxy; a malformed entry ends the walk (the connection's own address stands);
- `X-Forwarded-Proto: https` from a loopback peer or a trusted proxy marks the request HTTPS (it can only make
  cookies `Secure`: a TLS proxy on the node);
- uvicorn's own proxy handling is off (aiops/service/server.py).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
MAX_HOPS = 16  # X-Forwarded-For entries looked at (a header of thousands is not walked)


def networks(values: Iterable[str]) -> tuple[Network, ...]:
    """`[http] trusted_proxies` as networks; a ValueError naming a value that is neither an address nor one."""
    out = []
    for value in values:
        try:
            out.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError:
            raise ValueError(
                f"{value[:60]!r} is not an IP address or network (e.g. 10.0.0.5, 10.0.0.0/24)"
            ) from None
    return tuple(out)


def address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """`text` as an IP address (IPv6 in brackets too), None when it is none."""
    try:
        return ipaddress.ip_address(text.strip().removeprefix("[").removesuffix("]"))
    except ValueError:
        return None


def is_loopback(host: str | None) -> bool:
    found = address(host or "")
    return found is not None and found.is_loopback


class Forwarded:
    """ASGI middleware: the client and scheme a trusted proxy says, nothing from anyone else."""

    def __init__(self, app: ASGIApp, trusted: tuple[Network, ...] = ()) -> None:
        self.app, self.trusted = app, trusted

    def _trusted(self, host: str) -> bool:
        found = address(host)
        return found is not None and any(found in net for net in self.trusted)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and scope.get("client"):
            peer = str(scope["client"][0])
            headers = dict(scope.get("headers", []))
            from_proxy = self._trusted(peer)
            if from_proxy or is_loopback(peer):
                proto = headers.get(b"x-forwarded-proto", b"").decode("latin-1").strip().lower()
                if proto in ("http", "https"):
                    scope = {
                        **scope,
                        "scheme": proto if scope["type"] == "http" else "wss" if proto == "https" else "ws",
                    }
            if from_proxy and b"x-forwarded-for" in headers:
                hops = headers[b"x-forwarded-for"].decode("latin-1").split(",")[-MAX_HOPS:]
                client = peer
                for hop in reversed(hops):
                    found = address(hop)
                    if found is None:
                        break  # malformed: what is left of it says nothing trustworthy
                    client = str(found)
                    if not self._trusted(client):
                        break
                scope = {**scope, "client": (client, 0)}
        await self.app(scope, receive, send)
