"""docs/getting-started.md's shell steps, run as written: the broker command, then the
commands of "A broker to play with" through bash, from an empty directory with only the installed
command on PATH; then the fragment path the page shows must exist once the broker stopped.

The only edits to the page's text: the broker listens on port 0 (its address is read from its
output and replaces ``http://127.0.0.1:8080``), and ``/tmp/gazette``, ``/tmp/gazette-store``
become directories under the test's ``tmp_path``.
"""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import signal
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "getting-started.md"


def section_blocks(title: str, lang: str) -> list[str]:
    text = PAGE.read_text(encoding="utf-8")
    section = text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{lang}\n(.*?)```", section, flags=re.S)


@pytest.mark.integration
def test_the_broker_steps_run_as_written(tmp_path):
    bash = section_blocks("A broker to play with", "bash")
    paths = section_blocks("A broker to play with", "text")
    assert len(bash) == 2 and len(paths) == 1, "the page's layout changed: update this test"
    data, store, cwd = tmp_path / "gazette", tmp_path / "gazette-store", tmp_path / "cwd"
    cwd.mkdir()

    def local(text: str) -> str:
        return text.replace("/tmp/gazette-store", str(store)).replace("/tmp/gazette", str(data))

    env = {k: v for k, v in os.environ.items() if not k.startswith(("BROKER_", "PYSPARK_GAZETTE_"))}
    env["PATH"] = f"{pathlib.Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    command = local(bash[0].strip()).replace("127.0.0.1:8080", "127.0.0.1:0")
    broker = subprocess.Popen(
        shlex.split(command), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = broker.stdout.readline()  # it says where it listens once it serves
        m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        assert m, line + broker.stderr.read()
        script = local(bash[1]).replace("http://127.0.0.1:8080", m.group(1))
        out = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
        )
        assert out.returncode == 0, out.stdout + out.stderr
        assert out.stdout.endswith('{"event_id": 1, "country": "DE"}\n{"event_id": 2, "country": "FR"}\n')
    finally:
        broker.send_signal(signal.SIGTERM)  # a broker stopping persists its spools
        code = broker.wait(timeout=120)
    assert code == 0

    # The documented path, with the date, the offsets and the SHA1 as wildcards.
    shown = local(paths[0].strip())
    pattern = re.sub(r"date=\d{4}-\d\d-\d\d", "date=*", shown)
    pattern = re.sub(r"[0-9a-f]{16}-[0-9a-f]{16}-<sha1>", "*-*-*", pattern)
    found = sorted(pathlib.Path("/").glob(pattern.lstrip("/")))
    assert len(found) == 1, f"no fragment at {pattern}: the store holds {sorted(map(str, store.rglob('*')))}"
    assert found[0].name.startswith("0000000000000000-")
