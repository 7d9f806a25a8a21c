"""The ``protocol.Journal`` gRPC servicer: List, Apply, Read, ListFragments, FragmentStoreHealth.

Each RPC lives in its module of :mod:`pyspark_gazette.broker.rpc`; this servicer verifies the
token and delegates. Status outcomes (journal not found, offset not yet available, ...) are
protocol responses; malformed requests are gRPC errors with the reason. Gazette returns a
request's ``Validate()`` error as a plain Go error, which gRPC sends as UNKNOWN; so does this
broker (verified against gazette v0.103.0, docs/protocol.md). With auth keys, every RPC is first
verified by :class:`~pyspark_gazette.broker.authz.Authorizer` (see there for the codes).
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc

from pyspark_gazette.broker.authz import Authorizer
from pyspark_gazette.broker.core import BrokerCore
from pyspark_gazette.broker.rpc import append as appender
from pyspark_gazette.broker.rpc import fragments, health, list_apply, read
from pyspark_gazette.protocol import pb, pb_grpc
from pyspark_gazette.protocol.auth import APPEND, APPLY, LIST, READ, REPLICATE


class JournalServicer(pb_grpc.JournalServicer):
    """Verifies each call's token (:class:`~pyspark_gazette.broker.authz.Authorizer`) and hands the
    call to its RPC's module in :mod:`pyspark_gazette.broker.rpc`."""

    def __init__(self, core: BrokerCore, authorizer: Authorizer | None = None):
        self.core = core
        self.headers = core.headers
        self.auth = authorizer or Authorizer(None)

    def List(self, request: pb.ListRequest, context: grpc.ServicerContext) -> Iterator[pb.ListResponse]:
        claims = self.auth.verify(context, LIST, "List", ends_at_expiry=True)
        yield from list_apply.serve_list(self.core, request, context, claims)

    def Apply(self, request: pb.ApplyRequest, context: grpc.ServicerContext) -> pb.ApplyResponse:
        claims = self.auth.verify(context, APPLY, "Apply")
        return list_apply.serve_apply(self.core, request, context, claims)

    def Append(self, request_iterator, context: grpc.ServicerContext) -> pb.AppendResponse:
        claims = self.auth.verify(context, APPEND, "Append")
        covers = None if claims is None else (lambda j: claims.covers(j.name, j.spec.labels))
        return appender.serve_append(self.core, request_iterator, context, covers=covers)

    def Replicate(self, request_iterator, context):
        self.auth.verify(context, REPLICATE, "Replicate")
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "the embedded broker has no peers to replicate with")

    def Read(self, request: pb.ReadRequest, context: grpc.ServicerContext) -> Iterator[pb.ReadResponse]:
        claims = self.auth.verify(context, READ, "Read", ends_at_expiry=True)
        yield from read.serve_read(self.core, request, context, claims)

    def ListFragments(self, request: pb.FragmentsRequest, context: grpc.ServicerContext) -> pb.FragmentsResponse:
        claims = self.auth.verify(context, READ, "ListFragments")
        return fragments.serve_list_fragments(self.core, request, context, claims)

    def FragmentStoreHealth(self, request: pb.FragmentStoreHealthRequest, context) -> pb.FragmentStoreHealthResponse:
        self.auth.verify(context, READ, "FragmentStoreHealth")
        return health.serve_store_health(self.core, request, context)
