"""The connection options of a query: how executors reach the brokers and the stores."""

from __future__ import annotations

import dataclasses
from typing import Any

from pyspark_gazette.client import ClientConfig
from pyspark_gazette.client.conn import parse_address, split_addresses
from pyspark_gazette.errors import OptionError
from pyspark_gazette.flow.hosted import BrokerToken
from pyspark_gazette.fragments.stores import STORES
from pyspark_gazette.spark.options.parsing import DEFAULTS


@dataclasses.dataclass(frozen=True)
class Connection:
    """How executors reach the brokers and the stores (primitives only: pickles to executors)."""

    address: str
    auth_token: str | None = dataclasses.field(default=None, repr=False)
    zone: str = ""
    file_root: str | None = None
    storage: tuple[tuple[str, Any], ...] = dataclasses.field(default=(), repr=False)
    broker_timeout: float | None = 300.0
    #: An Estuary-hosted collection's authorization (flow/hosted.py): its broker token renews itself.
    hosted: Any = None

    def client_config(self, *, direct_reads: bool = True, task: bool = False):
        """The client configuration of these options. ``task``: for a Spark task, whose query's
        planning reached ``broker.address``: brokers down when it starts are waited for
        ``broker.timeout`` (a restart), not failed fast as a wrong address."""
        token: Any = self.auth_token
        if self.hosted is not None:
            token = BrokerToken(self.hosted)
        return ClientConfig(
            self.address,
            auth_token=token,
            file_root=self.file_root,
            direct_reads=direct_reads,
            zone=self.zone,
            broker_timeout=self.broker_timeout,
            reached=task,
        )

    def storage_options(self) -> dict[str, Any]:
        return dict(self.storage)


# Option -> scoped storage setting ("store.s3.accessKeyId" -> "s3.key"), from each store backend's
# settings (pyspark_gazette.fragments.stores; scoping: scheme_options).
_STORAGE_SETTINGS = tuple(
    (key, f"{backend.option_scope}.{setting}") for backend in STORES.values() for key, setting in backend.settings
)


def connection_from(values: dict[str, Any]) -> Connection:
    address = values.get("broker.address")
    store_only = bool(values.get("store.url"))
    if store_only:
        address = ""  # a read of the store alone contacts no broker (spark/read/store_plan.py)
    elif not address:
        raise OptionError("broker.address", "is required (or set BROKER_ADDRESS), e.g. http://127.0.0.1:8080")

    try:
        for one in split_addresses(address) if address else ():
            parse_address(one)
    except ValueError as e:
        raise OptionError("broker.address", str(e)) from None
    # Storage options are scoped per scheme ("s3.key" reaches s3:// stores only).
    storage: dict[str, Any] = {}
    for key, setting in _STORAGE_SETTINGS:
        if values.get(key):
            storage[setting] = values[key]
    if bool(storage.get("s3.key")) != bool(storage.get("s3.secret")):
        raise OptionError("store.s3.accessKeyId", "store.s3.accessKeyId and store.s3.secretAccessKey go together")
    return Connection(
        address=address,
        auth_token=values.get("broker.authToken"),
        zone=values.get("broker.zone") or "",
        file_root=values.get("store.fileRoot") or ("/" if store_only and _is_file_url(values["store.url"]) else None),
        storage=tuple(sorted(storage.items())),
        broker_timeout=_broker_timeout(values),
    )


def _broker_timeout(values: dict[str, Any]) -> float | None:
    """``broker.timeout`` in seconds (parsed, or its parsed default), None for 0 (forever)."""
    value = values["broker.timeout"] if "broker.timeout" in values else DEFAULTS["broker.timeout"]
    return float(value) or None


def _is_file_url(url: str) -> bool:
    """Whether ``url`` is a ``file://`` store URL: read alone, its paths are absolute unless
    ``store.fileRoot`` roots them."""
    return url.lower().startswith("file:")
