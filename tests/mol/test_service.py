"""The mol endpoint: per turn the routed adapter of the served version answers (checked against that adapter alone),
with route, adapter, version, latency and verifier result; through a real loopback HTTP server; a rollback is served
from the next request on; an altered served file is refused; loopback only; the one-shot CLI."""
import json
import shutil
import threading
import urllib.error
import urllib.request

import numpy as np
import pytest

from paperworks.mol import service as S
from paperworks.mol import world as W

TURNS = ["call a tool to show the open invoices of ana, limit 3", "also, list the draft files of bob, limit 2",
         "render a ui to get the closed tickets of kim, limit 5", "tell me in words: plot the open products of eli, limit 1"]


def test_parse_request_reads_every_prompt_form():
    rng = np.random.default_rng(0)
    for cap in W.CAPABILITIES:
        for x in W.make_items(rng, cap, 30, 0.2, weak_share=0.3, verbs=W.ALL_VERBS):
            text = x["prompt"].removeprefix("user: ").removesuffix("\nassistant:")
            assert S.parse_request(text) == W.request_from_dict(x), text
    assert S.parse_request("hello there") is None
    assert S.parse_request("show the open invoices of zed, limit 3") is None  # nobody of the world


def test_user_turns_validates_the_body():
    assert S.user_turns({"turns": [" user: a ", "b"]}) == ["a", "b"]
    assert S.user_turns({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "x"},
                                      {"role": "user", "content": "b"}]}) == ["a", "b"]
    for bad in (None, [], {}, {"turns": []}, {"turns": [""]}, {"turns": "a"}, {"turns": [1]}, {"messages": "a"},
                {"turns": ["a"] * (S.MAX_TURNS + 1)}, {"turns": ["a" * (S.MAX_TURN_CHARS + 1)]}):
        with pytest.raises(ValueError):
            S.user_turns(bad)


@pytest.fixture
def served(tiny_repo, tmp_path):
    """A version store (v0 = the four adapters, v1 = a different agent adapter) in its own folder."""
    from paperworks.core.lm import load_checkpoint
    from paperworks.mol.artifacts import BASE, seed_dir
    from paperworks.mol.versions import VersionStore
    from tests.mol.conftest import random_adapter

    store = VersionStore(tmp_path / "versions")
    store.init({cap: tiny_repo / seed_dir(0) / "adapters" / f"{cap}.safetensors" for cap in W.CAPABILITIES}, {"candidate": "-"})
    base, _, _ = load_checkpoint(tiny_repo / BASE)
    new = random_adapter(base, 2, 2.0, 999, tmp_path / "agent_v1.safetensors")
    assert store.propose("cand1", "agent", new, [{"name": "ok", "passed": True}], {"shift": 1})["version"] == "v1"
    return store


def _alone(tiny_repo, path, prompt):
    """The answer of one adapter file loaded alone into a fresh single-adapter model (independent of the deployment)."""
    from peft import set_peft_model_state_dict

    from paperworks.core.io import load_safetensors
    from paperworks.core.lm import load_checkpoint, load_tokenizer
    from paperworks.mol.artifacts import BASE, WORLD
    from paperworks.mol.models import freeze, generate, lora_model

    base, _, _ = load_checkpoint(tiny_repo / BASE)
    model = lora_model(freeze(base), 2, 2.0, 0).eval()
    set_peft_model_state_dict(model, load_safetensors(path))
    return generate(model, load_tokenizer(tiny_repo / WORLD / "tokenizer.json"), [prompt], 32)[0].strip()


def test_each_turn_is_answered_by_its_routed_adapter(tiny_repo, served):
    from paperworks.mol.fifth import verify

    dep = S.Deployment(tiny_repo, served.root)
    out = dep.answer(TURNS)
    assert out["version"] == "v1" and len(out["turns"]) == len(TURNS)
    sha = served.serving()["sha256"]
    prev = None
    for t, text in zip(out["turns"], TURNS):
        cap = t["route"]
        assert cap == t["adapter"]["name"] and t["adapter"]["sha256"] == sha[cap] and t["version"] == "v1"
        assert t["adapter"]["path"].endswith(f"accepted/v1/{cap}.safetensors")
        assert t["answer"] == _alone(tiny_repo, served.root / t["adapter"]["path"].split("versions/", 1)[-1], f"user: {text}\nassistant:")
        proba = dep.router([text])[0]
        assert t["confidence"] == pytest.approx(float(proba.max()), abs=1e-4)
        if t["fallback"]:
            assert cap == prev and proba.max() < dep.p.router.confidence_threshold
        else:
            assert cap == W.CAPABILITIES[int(proba.argmax())]
        req = S.parse_request(text)
        assert t["verifier"]["request"] == {"verb": req.verb, "obj": req.obj, "owner": req.owner, "status": req.status, "limit": req.limit}
        assert t["verifier"]["passed"] == verify(cap, req, t["answer"], dep.tables)
        assert t["latency_ms"] > 0
        prev = cap
    # a turn with no request of the world: answered, nothing to verify
    hello = dep.answer(["tell me in words: hello"])["turns"][0]
    assert hello["answer"] == _alone(tiny_repo, served.root / hello["adapter"]["path"].split("versions/", 1)[-1],
                                     "user: tell me in words: hello\nassistant:")
    assert hello["verifier"] == {"capability": hello["route"], "request": None, "passed": None}


def _post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return resp.status, json.loads(resp.read())


def test_http_endpoint_on_loopback_serves_rollback_and_refuses_altered_files(tiny_repo, served):
    from paperworks.core.io import ArtifactError
    from paperworks.mol import versions as V

    dep = S.Deployment(tiny_repo, served.root)
    server = S.make_server(dep, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}"
    try:
        code, body = _post(base + "/chat", {"turns": TURNS[:2]})
        direct = dep.answer(TURNS[:2])
        assert code == 200 and body["version"] == "v1"
        strip = lambda r: [{k: v for k, v in t.items() if k != "latency_ms"} for t in r["turns"]]  # noqa: E731
        assert strip(body) == strip(direct)
        assert all(t["latency_ms"] > 0 for t in body["turns"])
        code, msgs = _post(base + "/chat", {"messages": [{"role": "user", "content": TURNS[0]}]})
        assert code == 200 and msgs["turns"][0]["answer"] == body["turns"][0]["answer"]
        with urllib.request.urlopen(base + "/health", timeout=30) as resp:
            health = json.loads(resp.read())
        assert health["version"] == "v1" and health["adapters"]["agent"]["sha256"] == served.serving()["sha256"]["agent"]

        for path, data, code in (("/chat", b"{not json", 400), ("/chat", b'{"turns": []}', 400), ("/other", b"{}", 404)):
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(urllib.request.Request(base + path, data=data), timeout=30)
            assert e.value.code == code and "error" in json.loads(e.value.read())
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(base + "/nope", timeout=30)
        assert e.value.code == 404

        V.main(["rollback", "v0", "--root", str(served.root)])  # the one command; the running server follows
        code, after = _post(base + "/chat", {"turns": [TURNS[0]]})
        assert after["version"] == "v0" and after["turns"][0]["adapter"]["sha256"] == served.serving()["sha256"][after["turns"][0]["route"]]
        assert after["turns"][0]["adapter"]["path"].endswith("accepted/v0/" + after["turns"][0]["route"] + ".safetensors")

        V.main(["rollback", "v1", "--root", str(served.root)])
        path = served.path("v0", "chat")  # an accepted version's file altered while v1 serves
        raw = bytearray(path.read_bytes())
        raw[-1] ^= 0xFF
        path.write_bytes(bytes(raw))
        with pytest.raises(ArtifactError, match="altered since acceptance"):
            V.main(["rollback", "v0", "--root", str(served.root)])  # rollback refuses it: v1 keeps serving
        assert _post(base + "/chat", {"turns": [TURNS[0]]})[1]["version"] == "v1"
        path = served.path("v1", "genui")  # a served file altered: the next request is refused, nothing is answered
        path.write_bytes(path.read_bytes()[:-1] + bytes([path.read_bytes()[-1] ^ 0xFF]))
        with pytest.raises(urllib.error.HTTPError) as e:
            _post(base + "/chat", {"turns": [TURNS[0]]})
        assert e.value.code == 500 and "altered" in json.loads(e.value.read())["error"]
    finally:
        server.shutdown()
        server.server_close()


def test_loopback_only_and_cli(tiny_repo, served, tmp_path, capsys):
    for host in ("0.0.0.0", "10.1.2.3", "example.org"):
        with pytest.raises(ValueError, match="loopback"):
            S.check_loopback(host)
    S.check_loopback("::1")
    assert S.main(["--serve", "8766", "--host", "0.0.0.0", "--root", str(tiny_repo)]) == 2
    assert "loopback" in capsys.readouterr().err
    assert S.main([TURNS[0], "--root", str(tiny_repo), "--store", str(served.root)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["version"] == "v1" and out["turns"][0]["text"] == TURNS[0] and "latency_ms" in out["turns"][0]
    empty = tmp_path / "empty"
    empty.mkdir()
    shutil.copy(tiny_repo / "params.yaml", empty / "params.yaml")
    assert S.main([TURNS[0], "--root", str(empty)]) == 2  # no world, no base, no store: one clear error
    assert "error:" in capsys.readouterr().err
