"""Driving the Go peer (tests/peers/gazette-peer, built by ``make gazette`` into .bin/).

The peer uses Gazette's own ``message`` and ``auth`` packages; its ``read-committed`` output is
the oracle the connector must agree with.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess

from required_tools import missing_tool

ROOT = pathlib.Path(__file__).resolve().parents[2]
PEER = ROOT / ".bin" / "gazette-peer"

CONTENT_TYPES = {"ndjson": "application/x-ndjson", "protobuf-fixed": "application/x-protobuf-fixed"}


def require_peer() -> pathlib.Path:
    if not PEER.exists():
        how = "run `make gazette`" if shutil.which("go") else "install Go (https://go.dev/dl/), then `make gazette`"
        missing_tool(f"gazette-peer is not installed: {how}")
    return PEER


def run(*args: str, timeout: float = 180) -> str:
    """Run a peer subcommand; its stdout. A failure raises with the peer's stderr."""
    proc = subprocess.run([str(require_peer()), *args], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"gazette-peer {args[0]} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def publish(
    address: str, journals: list[str], framing: str, *, seed: int, rounds: int = 60, producers: int = 4
) -> None:
    run(
        "publish",
        f"--broker={address}",
        f"--journals={','.join(journals)}",
        f"--framing={framing}",
        f"--seed={seed}",
        f"--rounds={rounds}",
        f"--producers={producers}",
    )


def read_committed(address: str, journals: list[str], *, buffer: int = 16, token: str = "") -> list[dict]:
    """Gazette's ReadCommittedIter over each journal: one dict per committed message."""
    out = run(
        "read-committed",
        f"--broker={address}",
        f"--journals={','.join(journals)}",
        f"--buffer={buffer}",
        f"--token={token}",
    )
    return [json.loads(line) for line in out.splitlines() if line]


def token(keys: str, capability: str, selector: str = "", expires: str = "1h") -> str:
    return run(
        "token", f"--keys={keys}", f"--capability={capability}", f"--selector={selector}", f"--expires={expires}"
    ).strip()


def flow_publish(address: str, journals: list[str], *, seed: int, rounds: int = 60, control: bool = True) -> None:
    """Flow-shaped documents into Flow-named journals (``.../region=<v>/pivot=...``): committed
    ones, transactions and their ACKs, a transaction never committed, and CONTROL documents
    (backfillBegin before, backfillComplete after) in every journal."""
    run(
        "flow-publish",
        f"--broker={address}",
        f"--journals={','.join(journals)}",
        f"--seed={seed}",
        f"--rounds={rounds}",
        f"--control={'true' if control else 'false'}",
    )
