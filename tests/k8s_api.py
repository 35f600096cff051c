"""A Kubernetes API server on 127.0.0.1 that answers the real paths and JSON shapes the drain and restart
actuator uses (no Kubernetes API server can run on these machines):

GET /api/v1/nodes (a NodeList), GET/PATCH /api/v1/nodes/{name} (merge or strategic-merge patch; a JSON patch gets 415 as from a real server for
a body it does not take), GET /api/v1/pods?fieldSelector=spec.nodeName=X, GET /api/v1/namespaces/{ns}/pods,
POST /api/v1/namespaces/{ns}/pods/{pod}/eviction (a policy/v1 Eviction; a pod named in `pdb_blocked` answers
429 TooManyRequests, as a PodDisruptionBudget makes it), DELETE /api/v1/namespaces/{ns}/pods/{pod} (its
controller, when it has one, re-creates a pod with a new name and uid, as a Job's controller does).
Errors are metav1 Status objects. Every request is recorded (method, path, query, content type, body).
"""

from __future__ import annotations

import copy
import json
import threading
import urllib.parse
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def pod(
    name: str, namespace: str, node: str, owner: tuple[str, str] | None = None, **meta: Any
) -> dict[str, Any]:
    refs = (
        []
        if owner is None
        else [
            {
                "apiVersion": "batch/v1",
                "kind": owner[0],
                "name": owner[1],
                "uid": str(uuid.uuid4()),
                "controller": True,
            }
        ]
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": str(uuid.uuid4()),
            "ownerReferences": refs,
            **meta,
        },
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "trainer"}]},
        "status": {"phase": "Running"},
    }


@dataclass
class Cluster:
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: list[dict[str, Any]] = field(default_factory=list)
    pdb_blocked: set[str] = field(default_factory=set)
    requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_node(self, name: str) -> None:
        self.nodes[name] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "uid": str(uuid.uuid4())},
            "spec": {},
        }


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Status",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


class _Handler(BaseHTTPRequestHandler):
    cluster: Cluster

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length)) if length else None

    def _handle(self, method: str) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        body = self._body() if method in ("POST", "PATCH", "PUT", "DELETE") else None
        c = self.cluster
        with c.lock:
            c.requests.append(
                {
                    "method": method,
                    "path": url.path,
                    "query": query,
                    "content_type": self.headers.get("Content-Type", ""),
                    "body": body,
                }
            )
            code, answer = self._route(method, url.path.strip("/").split("/"), query, body)
        self._send(code, answer)

    def _route(
        self, method: str, parts: list[str], query: dict[str, list[str]], body: Any
    ) -> tuple[int, dict[str, Any]]:
        c = self.cluster
        if parts == ["api", "v1", "nodes"] and method == "GET":
            items = copy.deepcopy(list(c.nodes.values()))
            return 200, {"apiVersion": "v1", "kind": "NodeList", "metadata": {}, "items": items}
        if parts[:3] == ["api", "v1", "nodes"] and len(parts) == 4:
            node = c.nodes.get(parts[3])
            if node is None:
                return 404, _status(404, "NotFound", f'nodes "{parts[3]}" not found')
            if method == "PATCH":
                if "json-patch" in self.headers.get("Content-Type", ""):
                    return 415, _status(415, "UnsupportedMediaType", "this test server takes merge patches")
                node["spec"].update((body or {}).get("spec", {}))
            return 200, node
        if parts == ["api", "v1", "pods"] and method == "GET":
            selector = query.get("fieldSelector", [""])[0]
            items = [
                p for p in c.pods if not selector or f"spec.nodeName={p['spec']['nodeName']}" == selector
            ]
            return 200, {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": copy.deepcopy(items)}
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) >= 5 and parts[4] == "pods":
            ns = parts[3]
            if len(parts) == 5 and method == "GET":
                items = [p for p in c.pods if p["metadata"]["namespace"] == ns]
                return 200, {
                    "apiVersion": "v1",
                    "kind": "PodList",
                    "metadata": {},
                    "items": copy.deepcopy(items),
                }
            found = [
                p for p in c.pods if p["metadata"]["namespace"] == ns and p["metadata"]["name"] == parts[5]
            ]
            if not found:
                return 404, _status(404, "NotFound", f'pods "{parts[5]}" not found')
            target = found[0]
            if len(parts) == 7 and parts[6] == "eviction" and method == "POST":
                if not body or body.get("kind") != "Eviction" or body.get("apiVersion") != "policy/v1":
                    return 400, _status(400, "BadRequest", "body must be a policy/v1 Eviction")
                if target["metadata"]["name"] in c.pdb_blocked:
                    return 429, _status(
                        429,
                        "TooManyRequests",
                        "Cannot evict pod as it would violate the pod's disruption budget.",
                    )
                c.pods.remove(target)
                return 201, body
            if len(parts) == 6 and method == "DELETE":
                c.pods.remove(target)
                refs = target["metadata"]["ownerReferences"]
                if refs:  # the controller re-creates it
                    again = copy.deepcopy(target)
                    again["metadata"]["name"] = f"{refs[0]['name']}-{uuid.uuid4().hex[:5]}"
                    again["metadata"]["uid"] = str(uuid.uuid4())
                    c.pods.append(again)
                return 200, target
        return 404, _status(404, "NotFound", "the server could not find the requested resource")

    def do_GET(self) -> None:
        self._handle("GET")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")


@contextmanager
def k8s_api(cluster: Cluster) -> Iterator[str]:
    """Serve `cluster` on 127.0.0.1 (a free port); yields the base URL; always stopped."""
    handler = type("Handler", (_Handler,), {"cluster": cluster})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
