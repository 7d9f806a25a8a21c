"""Broker identity and response headers.

The embedded broker is the only member of every journal's route and its primary. There is no
Etcd: the broker keeps a :class:`ClusterState` of its own (cluster and member ids, a raft term
bumped at every start, and a revision bumped by every Apply) so headers carry the four non-zero
values real clients expect.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass

from pyspark_gazette.protocol import pb

#: Failure zone reported in ``process_id`` and routes.
ZONE = "local"


def new_process_suffix() -> str:
    """A process suffix unique to one broker instance (a token: letters, digits, ``-``)."""
    return "broker-" + uuid.uuid4().hex[:12]


def new_nonzero_id() -> int:
    """A random non-zero uint64, used for cluster and member ids."""
    while True:
        value = uuid.uuid4().int & 0xFFFF_FFFF_FFFF_FFFF
        if value:
            return value


@dataclass
class ClusterState:
    """The Etcd-like state a header reports; ``revision`` only moves forward."""

    cluster_id: int
    member_id: int
    raft_term: int
    revision: int


class HeaderFactory:
    """Builds :class:`pb.Header` messages naming this broker as sole member and primary."""

    def __init__(self, state: ClusterState, suffix: str, endpoint: str = ""):
        self._state = state
        self._lock = threading.Lock()
        self.process_id = pb.ProcessSpec.ID(zone=ZONE, suffix=suffix)
        self.endpoint = endpoint

    @property
    def state(self) -> ClusterState:
        return self._state

    @property
    def revision(self) -> int:
        return self._state.revision

    def route(self) -> pb.Route:
        endpoints = [self.endpoint] if self.endpoint else []
        return pb.Route(members=[self.process_id], primary=0, endpoints=endpoints)

    def header(self, *, with_route: bool = True, revision: int | None = None) -> pb.Header:
        """A response header. ``with_route=False`` is Gazette's "unrouted" header, as List, Apply
        and FragmentStoreHealth send it: no members and primary -1, since the answer concerns no
        single journal."""
        s = self._state
        return pb.Header(
            process_id=self.process_id,
            route=self.route() if with_route else pb.Route(primary=-1),
            etcd=pb.Header.Etcd(
                cluster_id=s.cluster_id,
                member_id=s.member_id,
                revision=s.revision if revision is None else revision,
                raft_term=s.raft_term,
            ),
        )
