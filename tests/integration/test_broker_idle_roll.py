"""An idle tail is persisted at its flush interval boundary, on both brokers (``backend``).

A journal with a ``flush_interval`` whose appends stop: the open spool is rolled once the
interval's boundary passes and persisted to the store, with no further append and long before
the store's next listing (``refresh_interval`` is an hour here). Real Gazette does it with a
zero-byte append every minute, so this waits up to about two minutes there.
"""

from __future__ import annotations

import pathlib
import time

from journalspecs import make_spec
from pyspark_gazette.fragments.names import FragmentRef
from pyspark_gazette.protocol import pb

#: A boundary passes within a minute; Gazette's pulse comes within a minute after that.
IDLE_ROLL_TIMEOUT = 200.0


def test_idle_tail_is_persisted_at_its_flush_boundary(backend):
    spec = make_spec(
        "idle/journal", store="file:///idle/", length=1 << 30, codec=pb.NONE, refresh_seconds=3600, flush_seconds=60
    )
    data = b'{"idle": "tail"}\n'
    with backend.client() as c:
        backend.create(c, [spec])
        if backend.broker is not None:  # the journal's one listing for the next hour is done
            assert backend.broker.core.journal(spec.name).listed.wait(30)
        commit = c.append(spec.name, data)
        assert (commit.begin, commit.end) == (0, len(data))
        expected = FragmentRef.from_proto(commit).content_name
        stored = pathlib.Path(backend.file_root, "idle", spec.name)
        deadline = time.monotonic() + IDLE_ROLL_TIMEOUT
        # Another process writes the store: poll it (there is no event to await across processes).
        while not (stored / expected).exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert (stored / expected).exists(), f"{spec.name} [0, {len(data)}) was not persisted while idle"
        assert sorted(p.name for p in stored.iterdir()) == [expected]
        assert (stored / expected).read_bytes() == data
        with c.reader(spec.name, 0, end_offset=len(data)) as r:
            assert b"".join(iter(r.read, b"")) == data
