"""Spans, and the W3C trace context they carry across HTTP and Pub/Sub.

The tracer lives here (set by :func:`noetl_cloud.telemetry.setup.configure`); while it is ``None``
every function returns at once and OpenTelemetry is not imported. A span made here is also made the
process's :data:`~noetl_cloud.observability.current_trace`, so log lines carry its ids and the
internal HTTP client sends its ``traceparent`` as it is (the downstream span's parent)."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypeVar

from noetl_cloud.observability import TraceContext, current_trace

if TYPE_CHECKING:
    from opentelemetry.trace import Span, SpanKind, Tracer

P = ParamSpec("P")
R = TypeVar("R")

_tracer: Tracer | None = None
_NULL: contextlib.nullcontext[None] = contextlib.nullcontext()


class _Attributed(Protocol):
    @property
    def attributes(self) -> Mapping[str, str]: ...


A = TypeVar("A", bound=_Attributed)


def tracing() -> bool:
    """Whether spans are recorded in this process (``NOETL_TRACING`` is not ``off``)."""
    return _tracer is not None


def set_tracer(tracer: Tracer | None) -> None:
    global _tracer, _otel
    if tracer is not None and _otel is None:
        _otel = _Otel()
    _tracer = tracer


class _Otel:
    """The OpenTelemetry API pieces a span needs, imported once, when tracing is first turned on."""

    def __init__(self) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.context = context
        self.trace = trace
        self.internal = trace.SpanKind.INTERNAL
        self.server = trace.SpanKind.SERVER
        self.propagator = TraceContextTextMapPropagator()


_otel: _Otel | None = None


def span(
    name: str,
    attributes: Mapping[str, Any] | None = None,
    *,
    parent: str | Mapping[str, Any] | None = None,
    root: bool = False,
    kind: SpanKind | None = None,
) -> contextlib.AbstractContextManager[Span | None]:
    """A span named ``name`` as the current span, ended when the block ends (an exception is recorded
    on it). Its parent: ``parent`` (a ``traceparent`` or a mapping with one: headers, Pub/Sub
    attributes, an execution's trace) when it holds a valid one, else a new trace when ``root``,
    else the current span. Off, the shared no-op context manager (``None`` as the span)."""
    if _tracer is None:
        return _NULL
    return _open(_tracer, name, attributes, parent, root, kind)


@contextlib.contextmanager
def _open(
    tracer: Tracer,
    name: str,
    attributes: Mapping[str, Any] | None,
    parent: str | Mapping[str, Any] | None,
    root: bool,
    kind: SpanKind | None,
) -> Iterator[Span]:
    assert _otel is not None
    ctx = None
    if parent:
        ctx = _extract({"traceparent": parent} if isinstance(parent, str) else parent)
    elif root:
        ctx = _otel.context.Context()
    with tracer.start_as_current_span(
        name, context=ctx, kind=kind or _otel.internal, attributes=_clean(attributes)
    ) as opened:
        token = current_trace.set(_as_trace_context(opened))
        try:
            yield opened
        finally:
            current_trace.reset(token)


def server_span(
    name: str, headers: Any, attributes: Mapping[str, Any] | None = None
) -> Callable[[BaseException | None], None] | None:
    """Open a server span for a request (the web layer's ``before_request``), a child of the caller's
    ``traceparent`` in ``headers`` or a new trace when ``headers`` is ``None`` (the public edge
    trusts no caller's trace). The function it returns ends the span; ``None`` when off."""
    if _tracer is None or _otel is None:
        return None
    manager = _open(_tracer, name, attributes, headers, headers is None, _otel.server)
    manager.__enter__()

    def end(exc: BaseException | None) -> None:
        manager.__exit__(type(exc) if exc is not None else None, exc, exc.__traceback__ if exc else None)

    return end


def remote_parent(traceparent: str | None) -> contextlib.AbstractContextManager[None]:
    """Inside the block, spans opened without a parent are children of ``traceparent`` (a context
    that came in a message, with no span of its own here). Off, or without one: nothing."""
    if _tracer is None or not traceparent:
        return _NULL
    return _attached(traceparent)


@contextlib.contextmanager
def _attached(traceparent: str) -> Iterator[None]:
    assert _otel is not None
    otel_context = _otel.context
    token = otel_context.attach(_extract({"traceparent": traceparent}))
    parsed = TraceContext.parse(traceparent)
    # The parent is a span recorded upstream: calls made here before a span of ours opens name it.
    logged = current_trace.set(dataclasses.replace(parsed, own=True)) if parsed is not None else None
    try:
        yield
    finally:
        if logged is not None:
            current_trace.reset(logged)
        otel_context.detach(token)


def in_context(fn: Callable[[], R]) -> Callable[[], R]:
    """``fn`` to run on another thread inside this thread's current span (a copy of the context
    variables); ``fn`` itself when off."""
    if _tracer is None:
        return fn
    return functools.partial(contextvars.copy_context().run, fn)


def traced(name: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorator: each call of the function in a span ``name`` (a plain call when off)."""

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def inner(*args: P.args, **kwargs: P.kwargs) -> R:
            if _tracer is None:
                return fn(*args, **kwargs)
            with span(name):
                return fn(*args, **kwargs)

        return inner

    return wrap


def annotate(**attributes: Any) -> None:
    """Set attributes on the current span (nothing when off or no span is current)."""
    if _tracer is None or _otel is None:
        return
    _otel.trace.get_current_span().set_attributes(_clean(attributes) or {})


def current_trace_dict() -> dict[str, str] | None:
    """The current span's W3C context as ``{"traceparent": ...}``; ``None`` when off or none is current."""
    if _tracer is None or _otel is None:
        return None
    ctx = _otel.trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return {"traceparent": f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags) & 1:02x}"}


def forward_trace(upstream: Mapping[str, str] | None) -> dict[str, str] | None:
    """The trace an execution started here carries: ``upstream`` (a verified, allowlisted
    ``traceparent`` of the sender) when off; on, the current span (so the execution's commands
    continue this trace), the upstream one kept as the span's ``noetl.upstream.traceparent`` and its
    baggage carried on."""
    own = current_trace_dict()
    if own is None:
        return dict(upstream) if upstream else None
    if upstream and upstream.get("traceparent"):
        annotate(**{"noetl.upstream.traceparent": upstream["traceparent"]})
        if upstream.get("baggage"):
            own["baggage"] = upstream["baggage"]
    return own


def inject_attributes(messages: Sequence[A]) -> Sequence[A]:
    """``messages`` with the current span's ``traceparent`` in the attributes of those that carry
    none (Pub/Sub's carrier of the W3C context); the same sequence when off or no span is current."""
    own = current_trace_dict()
    if own is None:
        return messages
    return [
        m if "traceparent" in m.attributes else dataclasses.replace(m, attributes={**m.attributes, **own})  # type: ignore[type-var]
        for m in messages
    ]


def _extract(carrier: Mapping[str, Any]) -> Any:
    assert _otel is not None
    return _otel.propagator.extract(carrier)


def _as_trace_context(opened: Span) -> TraceContext:
    ctx = opened.get_span_context()
    before = current_trace.get()
    return TraceContext(
        f"{ctx.trace_id:032x}",
        f"{ctx.span_id:016x}",
        f"{int(ctx.trace_flags) & 1:02x}",
        baggage=before.baggage if before is not None else None,
        own=True,
    )


def _clean(attributes: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """OpenTelemetry takes str, bool, int, float (or sequences of one); ``None`` values are left out."""
    if not attributes:
        return None
    return {k: v if isinstance(v, str | bool | int | float) else str(v) for k, v in attributes.items() if v is not None}
