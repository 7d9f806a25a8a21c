"""Write heads of many journals (client/heads.py): the sweep and the watcher, against both brokers
(the ``backend`` fixture: the embedded broker and a real Gazette v0.103.0 cluster)."""

from __future__ import annotations

import time

import pytest

from journalspecs import make_spec
from pyspark_gazette.client import Change
from pyspark_gazette.client.heads import HeadWatcher, route_heads, write_head
from pyspark_gazette.errors import JournalNotFoundError


@pytest.fixture
def client(backend):
    with backend.client() as c:
        yield c


def create(backend, client, names):
    backend.create(client, [make_spec(n, store="") for n in names])


def wait_for(fn, what: str, timeout: float = 30):
    deadline = time.monotonic() + timeout
    while not fn():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_sweep_returns_every_journals_write_head(backend, client):
    names = [f"heads/s{i:02d}" for i in range(40)]
    create(backend, client, names)
    for i, n in enumerate(names):
        for k in range(i % 3):
            client.append(n, b'{"k":%d}\n' % k)
    expected = {n: len(b"".join(b'{"k":%d}\n' % k for k in range(i % 3))) for i, n in enumerate(names)}
    client.list_journals("")  # routes, as a planner has them
    assert route_heads(client.conns, names, window=8) == expected
    assert route_heads(client.conns, names, window=1) == expected
    assert write_head(client.conns, names[2]) == expected[names[2]]


def test_write_head_of_a_missing_journal_raises(backend, client):
    with pytest.raises(JournalNotFoundError):
        write_head(client.conns, "heads/never-created")


def test_watcher_follows_appends_and_leaves_idle_journals_alone(backend, client):
    names = [f"heads/w{i:02d}" for i in range(30)]
    create(backend, client, names)
    client.append(names[0], b"a\n")
    with HeadWatcher(client.conns) as w:
        w.watch(route_heads(client.conns, names))
        assert w.heads(names) == {n: (2 if n == names[0] else 0) for n in names}
        head = client.append(names[5], b"bb\n").end
        head = client.append(names[5], b"ccc\n").end
        client.append(names[0], b"d\n")
        wait_for(lambda: w.heads([names[5]]) == {names[5]: head}, "the watched head of an appended journal")
        wait_for(lambda: w.heads([names[0]]) == {names[0]: 4}, "the watched head of another appended journal")
        # Journals nobody appended to keep their head; journals never watched are left out.
        assert w.heads(names[10:12] + ["heads/other"]) == {names[10]: 0, names[11]: 0}
        w.unwatch([names[5]])
        assert names[5] not in w.heads(names)
        assert len(w.watched()) == len(names) - 1


def test_watches_of_hundreds_of_journals_leave_the_broker_serving(backend, client):
    """300 open watches (more than the embedded broker's old pool of 256 worker threads, which
    they would have filled): every watch still answers its journal's append, and appends, Lists
    and sweeps go on meanwhile."""
    names = [f"heads/m{i:03d}" for i in range(300)]
    create(backend, client, names)
    with HeadWatcher(client.conns) as w:
        w.watch(route_heads(client.conns, names))
        assert w.watched() == set(names)
        appended = {n: client.append(n, b"x" * (i + 1) + b"\n").end for i, n in enumerate(names[::50] + names[-3:])}
        wait_for(lambda: w.heads(list(appended)) == appended, "the watched heads of appended journals")
        assert len(client.list_journals("")) >= len(names)
        assert route_heads(client.conns, names[-3:]) == {n: appended[n] for n in names[-3:]}
        assert len(w.watched()) == len(names)


def test_watcher_forgets_a_deleted_journal(backend, client):
    names = ["heads/gone", "heads/kept"]
    create(backend, client, names)
    with HeadWatcher(client.conns) as w:
        w.watch(route_heads(client.conns, names))
        gone = next(j for j in client.list_journals("") if j.name == names[0])
        client.apply([Change(expect_mod_revision=gone.mod_revision, delete=names[0])])
        # Its blocking read ends with an error or a non-OK status: the caller sweeps it again.
        wait_for(lambda: names[0] not in w.watched(), "the deleted journal's watch to end")
        head = client.append(names[1], b"still\n").end
        wait_for(lambda: w.heads(names) == {names[1]: head}, "the other journal's watch to go on")


def test_list_fragments_many_lists_each_journal_in_order(backend, client):
    from pyspark_gazette.client.list_apply import list_fragments, list_fragments_many

    names = [f"heads/f{i:02d}" for i in range(10)]
    create(backend, client, names)
    for i, n in enumerate(names):
        for k in range(i % 4):
            client.append(n, b'{"k":%d}\n' % k)
    client.list_journals("")
    expected = [(n, list_fragments(client.conns, n)) for n in names]
    assert [len(f) for _, f in expected] != [0] * len(names)
    for window in (1, 3, 128):
        assert list(list_fragments_many(client.conns, names, window=window)) == expected
    # A missing journal raises where it comes, after the journals before it.
    got = []
    with pytest.raises(JournalNotFoundError):
        for item in list_fragments_many(client.conns, [*names[:4], "heads/never-created", *names[4:]], window=3):
            got.append(item)
    assert got == expected[:4]


def test_watchers_one_after_another_share_the_process_loop(backend, client):
    """A watcher closed, then another (a query restarted in the same driver): the second runs on
    the same event loop, which grpc.aio is bound to, and follows appends."""
    name = "heads/again"
    create(backend, client, [name])
    loops = []
    for _ in range(2):
        with HeadWatcher(client.conns) as w:
            loops.append(w._loop)
            w.watch(route_heads(client.conns, [name]))
            head = client.append(name, b"again\n").end
            wait_for(lambda w=w, head=head: w.heads([name]) == {name: head}, "the watched head")
    assert loops[0] is loops[1] and loops[0].is_running()
