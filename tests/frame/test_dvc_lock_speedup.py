"""The dvc.lock hook (`paperworks/dvc_lock_speedup.py`, installed by `make setup`): DVC parses a comment-free dvc.lock
with the C safe loader before a lock write, writes the same bytes as without the hook, and everything else keeps the
round-trip loader."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import REPO, VENV_BIN, tool_env

PROBE = ("import sys; import dvc.utils.serialize._yaml as y; "
         "print(hasattr(y.parse_yaml_for_update, '__wrapped__'), 'paperworks' in sys.modules)")


def probe(env: dict[str, str]) -> str:
    return subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True,
                          cwd="/").stdout.strip()


def test_the_venv_patches_dvc_when_it_imports_its_yaml_module_and_imports_nothing_of_the_project():
    # the hook must not import `paperworks` at interpreter start: a test copy's stages must import their own code
    assert probe(tool_env()) == "True False", "the venv lacks the dvc.lock hook (or it imports the project): run `make setup`"
    assert probe(dict(tool_env(), PAPERWORKS_DVC_LOCK_SPEEDUP="0")) == "False False"


def test_a_comment_free_lock_parses_to_the_same_data_and_dumps_to_the_same_bytes():
    from dvc.utils.serialize._yaml import _dump, parse_yaml
    from ruamel.yaml.comments import CommentedMap

    import dvc.utils.serialize._yaml as dvc_yaml
    from paperworks.dvc_lock_speedup import lock_aware_parse

    round_trip = getattr(dvc_yaml.parse_yaml_for_update, "__wrapped__", dvc_yaml.parse_yaml_for_update)
    parse = lock_aware_parse(round_trip, parse_yaml)
    text = (REPO / "dvc.lock").read_text()
    fast, slow = parse(text, "dvc.lock"), round_trip(text, "dvc.lock")
    assert type(fast) is dict and isinstance(slow, CommentedMap)
    assert fast == slow
    dumped = []
    for data in (fast, slow):
        out = io.StringIO()
        _dump(data, out)
        dumped.append(out.getvalue())
    assert dumped[0] == dumped[1] == text
    # what the round trip is for stays on it: comments, and every file that is not dvc.lock (flow-style lists)
    assert isinstance(parse("# kept\nschema: '2.0'\n", "dvc.lock"), CommentedMap)
    assert isinstance(parse("seeds: [0, 1]\n", "params.yaml"), CommentedMap)
    assert isinstance(parse("stages: {}\n", str(Path("sub") / "dvc.yaml")), CommentedMap)


def test_repro_writes_the_same_lock_with_the_hook_on_and_off(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "params.yaml").write_text("a: 1\nb: 0.003\n")
    (repo / "in.txt").write_text("input\n")
    (repo / "dvc.yaml").write_text(textwrap.dedent("""\
        stages:
          first:
            cmd: python -c "open('one.txt', 'w').write(open('in.txt').read() * 2)"
            deps: [in.txt]
            params: [a]
            outs: [one.txt]
          second:
            cmd: python -c "open('two.txt', 'w').write(open('one.txt').read() + 'x')"
            deps: [one.txt]
            params: [b]
            outs: [two.txt]
        """))
    env = dict(tool_env(), GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    dvc = str(VENV_BIN / "dvc")

    def sh(*cmd: str, hook: str = "1") -> None:
        proc = subprocess.run(list(cmd), cwd=repo, env=dict(env, PAPERWORKS_DVC_LOCK_SPEEDUP=hook), capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr

    sh("git", "init", "-q")
    sh(dvc, "init", "-q")
    sh(dvc, "repro", hook="0")                      # the starting lock, written by DVC alone
    start = (repo / "dvc.lock").read_bytes()
    written = {}
    for hook in ("1", "0"):
        (repo / "dvc.lock").write_bytes(start)
        (repo / "params.yaml").write_text("a: 2\nb: 0.003\n")   # a changed param: both stages rerun, the lock is rewritten
        sh(dvc, "repro", hook=hook)
        written[hook] = (repo / "dvc.lock").read_bytes()
        (repo / "params.yaml").write_text("a: 1\nb: 0.003\n")
    assert written["1"] == written["0"] != start
    assert b"a: 2" in written["1"]
    assert os.path.exists(repo / "two.txt")
