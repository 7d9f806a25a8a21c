"""The quickstart job (``pyspark-gazette quickstart``, the README's main command).

Starts an embedded broker with a local ``file://`` fragment store, creates the journals of
``conf/journals/quickstart.yaml``, appends a sample dataset of click events through the batching
append service, reads the data back (persisted fragments straight from the store, the live tail
through the broker), checks that every event arrived exactly once, writes an aggregate to a
second journal, and prints a report. Exits non-zero on any failure.
"""

from __future__ import annotations

import collections
import json
import os
import pathlib
import random
import shutil
import sys
import time
from typing import Any

SPECS = pathlib.Path("conf/journals/quickstart.yaml")
CLICKS = "quickstart/clicks"
BY_COUNTRY = "quickstart/clicks-by-country"
COUNTRIES = ["US", "DE", "FR", "BR", "IN", "JP", "GB", "CA", "MX", "NG"]
PAGES = ["/", "/search", "/product", "/cart", "/checkout", "/help", "/account"]
DEVICES = ["mobile", "desktop", "tablet"]


def _say(text: str = "") -> None:
    print(text, flush=True)


def make_events(count: int, seed: int = 42, start_ts: float = 1_767_225_600.0) -> list[dict[str, Any]]:
    """``count`` deterministic click events (the same seed gives the same data)."""
    rng = random.Random(seed)
    out = []
    ts = start_ts
    for i in range(count):
        ts += rng.expovariate(50.0)
        out.append(
            {
                "event_id": i,
                "ts": round(ts, 3),
                "user_id": f"u{rng.randrange(20_000):05d}",
                "country": rng.choices(COUNTRIES, weights=(30, 12, 10, 9, 9, 8, 8, 6, 5, 3))[0],
                "page": rng.choice(PAGES),
                "device": rng.choice(DEVICES),
                "duration_ms": int(rng.lognormvariate(6.5, 0.8)),
            }
        )
    return out


def _find_specs() -> pathlib.Path:
    for base in (pathlib.Path.cwd(), pathlib.Path(__file__).resolve().parents[2]):
        if (base / SPECS).exists():
            return base / SPECS
    raise FileNotFoundError(f"{SPECS} not found: run the quickstart from the repository root")


def run_quickstart(data_dir: str = ".gazette/quickstart", events: int = 200_000, keep: bool = False) -> int:
    from pyspark_gazette.broker import EmbeddedBroker
    from pyspark_gazette.client import AppendService, Change, ClientConfig, JournalClient
    from pyspark_gazette.client.specs import load_specs

    if events <= 0:
        print("error: --events must be positive", file=sys.stderr)
        return 2
    root = pathlib.Path(data_dir).resolve()
    if root.exists() and not keep:
        shutil.rmtree(root)
    broker_dir, store_root = root / "broker", root / "store"
    store_root.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()

    _say(f"pyspark-gazette quickstart: {events:,} click events, data in {root}")
    with EmbeddedBroker(str(broker_dir), file_root=str(store_root)) as broker:
        _say(f"[1/5] embedded broker listening on {broker.address} (fragment store file root {store_root})")
        config = ClientConfig(broker.address, file_root=str(store_root))
        with JournalClient(config) as client:
            nodes = load_specs(_find_specs().read_text())
            client.apply([Change(expect_mod_revision=-1, upsert=n.spec) for n in nodes])
            _say(f"[2/5] applied {len(nodes)} journal specs from {SPECS}: {', '.join(n.spec.name for n in nodes)}")

            t = time.perf_counter()
            rows = make_events(events)
            batch, step = 2_000, max(1, events // 10)
            chunks = [
                "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in rows[i : i + batch]).encode()
                for i in range(0, events, batch)
            ]
            timings["generate"] = time.perf_counter() - t
            payload_bytes = sum(len(c) for c in chunks)
            t = time.perf_counter()
            # 1 MiB batches: appends are never split, so smaller batches let the journal roll to a
            # new fragment every ~4 MiB (its spec's length), as a steady stream of writers would.
            service = AppendService(client.conns, max_batch_bytes=1 << 20)
            pending = []
            for i, chunk in zip(range(0, events, batch), chunks, strict=True):
                pending.append(service.append(CLICKS, chunk))
                done = min(events, i + batch)
                if done // step != (done - batch) // step or done == events:
                    _say(f"      appending: {100 * done // events:3d}% ({done:,}/{events:,} events)")
            service.close()
            commits = [aa.wait() for aa in pending]
            spans = [c for c in commits if c is not None]
            begin, end = min(c.begin for c in spans), max(c.end for c in spans)
            timings["append"] = time.perf_counter() - t
            _say(
                f"[3/5] appended {payload_bytes / 1e6:.1f} MB in {service.rpcs} Append RPCs "
                f"({payload_bytes / 1e6 / timings['append']:.1f} MB/s)"
            )

            broker.wait_persisted(60)
            t = time.perf_counter()
            counts: collections.Counter[str] = collections.Counter()
            seen_ids = 0
            id_sum = 0
            with client.retry_reader(CLICKS, begin, end_offset=end, block=True) as reader:
                buf = b""
                while data := reader.read():
                    buf += data
                    lines = buf.split(b"\n")
                    buf = lines.pop()
                    for line in lines:
                        event = json.loads(line)
                        counts[event["country"]] += 1
                        seen_ids += 1
                        id_sum += event["event_id"]
                direct = reader.direct_bytes
            timings["read"] = time.perf_counter() - t
            read_bytes = end - begin
            frags = client.list_fragments(CLICKS)
            persisted = [f for f in frags if f.spec.backing_store and f.spec.mod_time]
            _say(
                f"[4/5] read {read_bytes / 1e6:.1f} MB back: {direct / 1e6:.1f} MB straight from persisted "
                f"fragment files, {(read_bytes - direct) / 1e6:.1f} MB of the live tail through the broker"
            )
            expected_sum = events * (events - 1) // 2
            if buf or seen_ids != events or id_sum != expected_sum:
                print(
                    f"error: read {seen_ids} events (id sum {id_sum}) but appended {events} (id sum {expected_sum})",
                    file=sys.stderr,
                )
                return 1

            summary = "".join(
                json.dumps({"country": c, "clicks": n, "run_ts": round(time.time(), 3)}) + "\n"
                for c, n in sorted(counts.items())
            )
            agg = client.append(BY_COUNTRY, summary.encode())
            _say(f"[5/5] wrote {len(counts)} per-country totals to {BY_COUNTRY} at [{agg.begin}, {agg.end})")

    total = time.perf_counter() - t0
    _say()
    _say("report")
    _say(f"  events appended and read back exactly once : {events:,}")
    _say(f"  bytes                                      : {read_bytes:,}")
    _say(f"  fragments now (persisted / still local)    : {len(persisted)} / {len(frags) - len(persisted)}")
    _say(f"  read directly from the store / via broker  : {direct:,} / {read_bytes - direct:,} bytes")
    _say(
        f"  generate / append / read / total time      : {timings['generate']:.2f}s / {timings['append']:.2f}s / "
        f"{timings['read']:.2f}s / {total:.2f}s"
    )
    top = ", ".join(f"{c} {n:,}" for c, n in counts.most_common(3))
    _say(f"  top countries                              : {top}")
    _say(f"  data directory                             : {root}{' (kept)' if keep else ''}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run_quickstart(os.environ.get("QUICKSTART_DIR", ".gazette/quickstart")))
