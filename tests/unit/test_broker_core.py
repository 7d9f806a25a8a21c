"""``BrokerCore``: the embedded broker's journal table against its spec registry."""

from __future__ import annotations

import threading

from pyspark_gazette.broker.core import BrokerCore
from pyspark_gazette.protocol import pb


def test_a_journal_listed_but_still_opening_is_waited_for_not_missing(tmp_path):
    """An Apply commits to the registry (so List returns the journal) and then opens the journal
    under the core's lock. A lookup in between waits for the Apply instead of answering
    JOURNAL_NOT_FOUND (Gazette never answers not-found for a journal its List returned)."""
    core = BrokerCore(str(tmp_path / "broker"), suffix="unit")
    try:
        spec = pb.JournalSpec(name="race/a", replication=1)
        spec.fragment.length = 1 << 20
        spec.fragment.refresh_interval.seconds = 60
        change = pb.ApplyRequest.Change(expect_mod_revision=0, upsert=spec)
        found: list = []
        looked = threading.Event()

        def lookup() -> None:
            found.append(core.journal("race/a"))
            looked.set()

        with core.lock:  # an Apply between its registry commit and opening the journal
            assert core.registry.apply([change])[0]
            thread = threading.Thread(target=lookup)
            thread.start()
            assert not looked.wait(0.5)  # the lookup waits for the lock: it did not answer None
            core._open_journal(core.registry.get("race/a"))
        thread.join(10)
        assert found and found[0] is not None and found[0].name == "race/a"
        assert core.journal("race/missing") is None  # not in the registry: not found at once
    finally:
        core.stop()
