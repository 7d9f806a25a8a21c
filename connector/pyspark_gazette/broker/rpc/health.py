"""The FragmentStoreHealth RPC."""

from __future__ import annotations

import grpc

from pyspark_gazette.broker.core import BrokerCore
from pyspark_gazette.errors import redact_url
from pyspark_gazette.protocol import pb
from pyspark_gazette.protocol.store_urls import parse_store_url


def serve_store_health(
    core: BrokerCore, request: pb.FragmentStoreHealthRequest, context: grpc.ServicerContext
) -> pb.FragmentStoreHealthResponse:
    """FragmentStoreHealth: the store's last health check (parsed URL first)."""
    try:
        parse_store_url(request.fragment_store)
    except ValueError as e:
        context.abort(grpc.StatusCode.UNKNOWN, redact_url(f"fragment_store: {e}"))
    error = core.stores.health(request.fragment_store)
    status = pb.FRAGMENT_STORE_UNHEALTHY if error else pb.OK
    return pb.FragmentStoreHealthResponse(
        status=status, header=core.headers.header(with_route=False), store_health_error=error
    )
