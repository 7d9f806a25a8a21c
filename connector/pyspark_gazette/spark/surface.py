"""How the connector's errors reach a user through Spark.

Spark shows an error raised in a Python data source as the Python traceback text its worker
formats (``[PYTHON_DATA_SOURCE_ERROR] ... Traceback ... SQLSTATE: 38000`` on the driver, ``An
exception was thrown from the Python worker ... Traceback ...`` from a task). pyspark (4.2, 4.3)
gives a Python data source no error-class hook of its own: the worker formats whatever is raised.
So the connector keeps that text short: :func:`plain` re-raises a
:class:`~pyspark_gazette.errors.GazetteError` at the entry point Spark called, without the
frames below it and without its chained causes (their text is already in our message), so our
sentence is the last line of the Python part, right before Spark's ``SQLSTATE`` suffix.
Anything else (a bug) keeps its whole traceback.

One frame stays, the re-raise itself: Spark's worker drops its own frames from a traceback up to
the first frame that is not pyspark's (``spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled``,
on by default) and shows the rest; a traceback with no such frame it shows whole. (A comment
on the re-raise's line would show too, and make Python add a line of carets under it.) Only the
user's session can drop that frame:
``spark.sql.execution.pyspark.udf.hideTraceback.enabled=true`` makes the worker send the
exception's last line alone, so our sentence follows Spark's prefix on the error's first line
(docs/troubleshooting.md has the measured difference).

Every entry point Spark calls goes through :func:`plain`, so it is also where a reused Python
worker settles its garbage collector (:func:`~pyspark_gazette.spark.worker_gc.settle`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from pyspark_gazette.errors import GazetteError
from pyspark_gazette.spark.worker_gc import settle

_F = TypeVar("_F", bound=Callable[..., Any])


def plain(fn: _F) -> _F:
    """``fn`` (a function or a generator function) raising our errors without their frames below
    it or their causes; each call first runs :func:`~pyspark_gazette.spark.worker_gc.settle`."""
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def gen(*args: Any, **kwargs: Any) -> Any:
            settle()
            try:
                yield from fn(*args, **kwargs)
            except GazetteError as error:
                raise error.with_traceback(None) from None

        return gen  # type: ignore[return-value]

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        settle()
        try:
            return fn(*args, **kwargs)
        except GazetteError as error:
            raise error.with_traceback(None) from None

    return call  # type: ignore[return-value]
