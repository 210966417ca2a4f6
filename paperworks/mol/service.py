"""Serve the accepted version: a conversation in, per turn the route, adapter, version, latency, answer and verifier result.

- :class:`Deployment` holds ONE peft model on the frozen base with the four adapters of the version store's served
  version as named adapters (``store.serving()`` re-hashes every file against ``serving.json``) and the headline router
  (refitted on the router's training conversations at start: a TF-IDF + LR fit takes well under a second). Each request
  re-reads ``serving.json``: after ``python -m paperworks.mol.versions rollback v0`` (or an accepted cycle of the
  Prefect deployment) the next request is answered by the version now served, without a restart.
- :meth:`Deployment.answer`: per user turn — route (with the fallback to the previous turn's route below the
  router's confidence threshold), ``set_adapter`` to the routed specialist, a greedy answer, and the verifier of the
  routed capability on the request parsed from the turn (``null`` when the turn holds no request of the world).
- ``python -m paperworks.mol.service "turn 1" "turn 2"`` answers once, without a server; ``--serve PORT`` serves
  ``POST /chat`` (JSON ``{"turns": ["…", …]}`` or ``{"messages": [{"role": "user", "content": "…"}, …]}``) and
  ``GET /health`` on loopback only, with stdlib ``http.server`` (as ``paperworks.eval_agent.service`` does).
"""
from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import re
import time
from dataclasses import asdict
from pathlib import Path
from typing import Sequence

import numpy as np

from paperworks.mol import world as W

_REQUEST = re.compile(rf"\b({'|'.join(W.ALL_VERBS)}) the ({'|'.join(W.STATUSES)}) ({'|'.join(W.OBJECTS)}) of "
                      rf"({'|'.join(W.NAMES)}), limit ([1-9])\b")
MAX_TURNS = 16
MAX_TURN_CHARS = 400
MAX_BODY_BYTES = 64 * 1024


def parse_request(text: str) -> W.Request | None:
    """The world request a user turn asks for (``None`` if it holds none): what the verifier checks the answer against."""
    m = _REQUEST.search(text)
    if m is None:
        return None
    verb, status, obj, owner, limit = m.groups()
    return W.Request(verb=verb, obj=obj, owner=owner, status=status, limit=int(limit))


def user_turns(body) -> list[str]:
    """The user turns of a request body: ``{"turns": [str, …]}`` or ``{"messages": [{"role", "content"}, …]}``."""
    if not isinstance(body, dict) or not ({"turns", "messages"} & set(body)):
        raise ValueError('the body must be a JSON object with "turns" (a list of strings) or "messages" (role/content objects)')
    if "turns" in body:
        turns = body["turns"]
    else:
        msgs = body["messages"]
        if not isinstance(msgs, list) or not all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in msgs):
            raise ValueError('"messages" must be a list of {"role": …, "content": "…"} objects')
        turns = [m["content"] for m in msgs if m.get("role", "user") == "user"]
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t.strip() for t in turns):
        raise ValueError("a conversation needs 1 or more user turns, each a non-empty string")
    if len(turns) > MAX_TURNS or any(len(t) > MAX_TURN_CHARS for t in turns):
        raise ValueError(f"at most {MAX_TURNS} turns of at most {MAX_TURN_CHARS} characters each")
    return [t.strip().removeprefix("user:").strip() for t in turns]


class Deployment:
    """The served version of a version store, routed per turn, in one process."""

    def __init__(self, root: Path | str = ".", store: Path | str | None = None, router: str | None = None):
        from paperworks.core.lm import load_checkpoint, load_tokenizer
        from paperworks.core.params import global_seed, load_section, read_params_file
        from paperworks.core.seeding import derive_seed
        from paperworks.mol.artifacts import BASE, VERSIONS, WORLD, read_world
        from paperworks.mol.models import freeze
        from paperworks.mol.params import Params
        from paperworks.mol.router import fit_router, turn_text
        from paperworks.mol.versions import VersionStore

        self.root = Path(root).resolve()
        p = load_section("mol", Params, self.root / "params.yaml")
        self.p = p
        world = read_world(self.root / WORLD)
        self.tables = world["tables"]
        self.tok = load_tokenizer(self.root / WORLD / "tokenizer.json")
        self.base, self.cfg, _ = load_checkpoint(self.root / BASE)
        freeze(self.base)
        self.store = VersionStore(self.root / (store or VERSIONS))
        self.router_name = router or p.router.headline
        train = world["router_train"]
        seed = derive_seed(global_seed(read_params_file(self.root / "params.yaml")), "mol", "router")
        self.router = fit_router(self.router_name, [turn_text(x) for x in train], [x["capability"] for x in train], seed)
        self.model, self.version, self.sha256, self._pointer = None, None, {}, b""
        self.refresh()

    def refresh(self) -> bool:
        """Check the served files; load the served version if ``serving.json`` changed since the last load (True then)."""
        from paperworks.core.io import load_safetensors
        from paperworks.mol.fifth import deployment
        from paperworks.mol.versions import SERVING

        served = self.store.serving()  # on every request: each served file re-hashed against the pointer (altered → error)
        pointer = (self.store.root / SERVING).read_bytes()
        if pointer == self._pointer and self.model is not None:
            return False
        tensors = {cap: load_safetensors(path) for cap, path in served["adapters"].items()}
        a = self.p.adapters
        self.model = deployment(self.base, a.rank, a.alpha_over_rank, tensors, seed=0)
        self.version, self.sha256, self._pointer = served["version"], served["sha256"], pointer
        self.paths = {cap: str(Path(path).relative_to(self.root)) if Path(path).is_relative_to(self.root) else str(path)
                      for cap, path in served["adapters"].items()}
        return True

    def health(self) -> dict:
        return {"version": self.version, "router": self.router_name, "routes": list(W.CAPABILITIES),
                "adapters": {cap: {"path": self.paths[cap], "sha256": self.sha256[cap]} for cap in W.CAPABILITIES},
                "pointer_sha256": hashlib.sha256(self._pointer).hexdigest()}

    def answer(self, turns: Sequence[str]) -> dict:
        from paperworks.mol.fifth import verify
        from paperworks.mol.models import generate
        from paperworks.mol.router import route_conversations

        self.refresh()
        turns = user_turns({"turns": list(turns)})
        items, probas, out = [], [], []
        for i, text in enumerate(turns):
            t0 = time.perf_counter()
            items.append({"conversation": 0, "turn": i, "capability": None, "prompt": f"user: {text}\nassistant:"})
            probas.append(self.router([text])[0])
            route = route_conversations(items, np.vstack(probas), self.p.router.confidence_threshold)[-1]
            cap = route["route"]
            self.model.set_adapter(cap)
            answer = generate(self.model, self.tok, [items[-1]["prompt"]], self.p.adapters.max_new_tokens)[0]
            latency = time.perf_counter() - t0
            req = parse_request(text)
            out.append({"turn": i, "text": text, "route": cap, "confidence": round(route["confidence"], 4), "fallback": route["fallback"],
                        "adapter": {"name": cap, "path": self.paths[cap], "sha256": self.sha256[cap]}, "version": self.version,
                        "answer": answer.strip(), "latency_ms": round(1000 * latency, 3),
                        "verifier": {"capability": cap, "request": asdict(req) if req else None,
                                     "passed": bool(verify(cap, req, answer, self.tables)) if req else None}})
        return {"version": self.version, "router": self.router_name, "turns": out}


def check_loopback(host: str) -> None:
    """The endpoint has no authentication: it binds loopback addresses only."""
    try:
        ok = ipaddress.ip_address(host).is_loopback
    except ValueError:
        ok = host == "localhost"
    if not ok:
        raise ValueError(f"refusing to serve on {host!r}: the mol endpoint has no authentication and binds loopback only "
                         "(127.0.0.1, ::1, localhost)")


def make_server(deployment: Deployment, host: str = "127.0.0.1", port: int = 8766):
    """A stdlib HTTP server (one request at a time): ``POST /chat`` → the per-turn answer as JSON (200); ``GET /health``
    → the served version and adapters; 400 with ``{"error": …}`` for a body it cannot answer, 404 elsewhere."""
    import json
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from paperworks.core.io import ArtifactError

    check_loopback(host)

    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, body: dict) -> None:
            data = json.dumps(body, default=float).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path.split("?")[0] != "/health":
                return self._send(404, {"error": f"unknown path {self.path!r}; use POST /chat or GET /health"})
            try:
                deployment.refresh()
                self._send(200, deployment.health())
            except (ValueError, ArtifactError, OSError) as e:
                self._send(500, {"error": str(e)})

        def do_POST(self) -> None:  # noqa: N802
            if self.path.split("?")[0] != "/chat":
                return self._send(404, {"error": f"unknown path {self.path!r}; use POST /chat"})
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                return self._send(400, {"error": "bad Content-Length"})
            if length > MAX_BODY_BYTES:
                return self._send(413, {"error": f"body over {MAX_BODY_BYTES} bytes"})
            try:
                body = json.loads(self.rfile.read(length) or b"null")
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                return self._send(400, {"error": f"body is not JSON: {e}"})
            try:
                self._send(200, deployment.answer(user_turns(body)))
            except ArtifactError as e:  # a served file altered on disk: nothing is answered by an unverified adapter
                self._send(500, {"error": str(e)})
            except ValueError as e:  # a body it cannot answer (no turns, a turn too long for the model)
                self._send(400, {"error": str(e)})

        def log_message(self, *a) -> None:  # keep stderr quiet
            pass

    return HTTPServer((host, port), Handler)


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json
    import sys

    ap = argparse.ArgumentParser(prog="python -m paperworks.mol.service",
                                 description="Answer a conversation with the served mol version (after mol_versions ran).")
    ap.add_argument("turns", nargs="*", help="user turns, e.g. 'call a tool to show the open invoices of ana, limit 3'")
    ap.add_argument("--serve", type=int, metavar="PORT", help="serve POST /chat and GET /health on --host:PORT instead")
    ap.add_argument("--host", default="127.0.0.1", help="loopback only (127.0.0.1, ::1, localhost)")
    ap.add_argument("--root", default=".", help="repository root (params.yaml, data/mol, models/mol)")
    ap.add_argument("--store", help="version store under the root (default data/mol/versions; the Prefect deployment's is data/mol/live)")
    ap.add_argument("--router", choices=("tfidf_lr", "minilm_lr", "rules"), help="default: mol.router.headline")
    a = ap.parse_args(argv)
    from paperworks.core.io import ArtifactError
    from paperworks.core.params import ParamsError

    try:
        if a.serve is not None:
            check_loopback(a.host)
        dep = Deployment(a.root, a.store, a.router)
        if a.serve is not None:
            server = make_server(dep, a.host, a.serve)
            print(f"serving {dep.version} on http://{a.host}:{server.server_port}/chat", file=sys.stderr)
            with contextlib.suppress(KeyboardInterrupt):
                server.serve_forever()
            return 0
        if not a.turns:
            ap.error("give one or more user turns (or --serve PORT)")
        out = dep.answer(a.turns)
    except (ValueError, ArtifactError, ParamsError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
