"""Pieces shared by the catalog document models: the strict base model, metadata, typed scalars,
YAML loading, byte sizes and the conversion of validation errors to ``{"field", "problem", "type"}``.

Rules that span several fields are checked in ``model_validator(mode="after")`` validators that
raise a pydantic :class:`~pydantic.ValidationError` built by :func:`raise_problems`: pydantic
prefixes its locations with the location of the model being validated, so every problem keeps a
dotted path to the field it names (``spec.ingress.verify.secret``), wherever the rule runs.
Messages never carry the rejected value: a misplaced secret must not come back in an error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Annotated, Any, TypedDict

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints, ValidationError, field_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from noetl_cloud.errors import ValidationFailed

#: A catalog path: ``/``-separated segments, none empty, none starting with a dot (so no ``..``).
CATALOG_PATH = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*$"
#: An execution pool name; the same rule as ``Settings.pools``.
POOL_NAME = r"^[a-z][a-z0-9-]{0,30}$"
#: A Secrets Wallet alias: a name, never a value (no spaces, no ``$``, no braces).
WALLET_ALIAS = r"^[A-Za-z0-9_][A-Za-z0-9_.:/@-]{0,254}$"

#: A listener name: the one segment after ``/ingress/`` of a push route. Lowercase only, so every
#: listener has exactly one spelling; routes take it through the ``listener`` URL converter.
LISTENER_NAME = r"[a-z0-9][a-z0-9_-]{0,62}"

#: An HTTP field name (RFC 9110 token); also fits Pub/Sub attribute and Kafka / NATS header keys.
HEADER_NAME = r"^[a-z0-9!#$%&'*+.^_`|~-]+$"


def _lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


CatalogPath = Annotated[str, StringConstraints(pattern=CATALOG_PATH, max_length=512)]
#: A header name, lowercased on load (header names are case-insensitive).
HeaderName = Annotated[str, BeforeValidator(_lower), StringConstraints(pattern=HEADER_NAME, max_length=256)]
HttpUrl = Annotated[str, StringConstraints(pattern=r"^https?://\S+$", max_length=2048)]
#: Keys are fetched over TLS; plain HTTP only from the local machine (an emulator).
JwksUrl = Annotated[
    str, StringConstraints(pattern=r"^(https://\S+|http://(localhost|127\.0\.0\.1)(:[0-9]+)?(/\S*)?)$", max_length=2048)
]
Email = Annotated[str, StringConstraints(pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$", max_length=320)]
PoolName = Annotated[str, StringConstraints(pattern=POOL_NAME)]
ApiVersion = Annotated[str, StringConstraints(pattern=r"^noetl\.io/v[0-9]+[a-z0-9]*$")]
WalletAlias = Annotated[str, StringConstraints(pattern=WALLET_ALIAS)]

_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5, "e": 6}
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*(?:([kmgtpe])(i)?)?(b)?$", re.IGNORECASE)
_MAX_BYTES = 2**63 - 1


class Problem(TypedDict):
    """One entry of :attr:`ValidationFailed.details`."""

    field: str
    problem: str
    type: str


class SpecModel(BaseModel):
    """Base of every catalog model: immutable, and unknown keys are errors (typos fail fast)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Metadata(SpecModel):
    """``metadata`` of a catalog document. ``path`` is where it lives in the catalog."""

    name: CatalogPath
    path: CatalogPath | None = None
    description: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    version: str | None = None

    @field_validator("version", mode="before")
    @classmethod
    def _version_as_text(cls, value: Any) -> Any:
        # YAML reads ``version: 2.0`` as a float; a version is text.
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        return value

    @property
    def catalog_path(self) -> str:
        """``path``, falling back to ``name``."""
        return self.path or self.name


# -- byte sizes -------------------------------------------------------------------------------------


def parse_byte_size(value: object) -> int:
    """Bytes from an int or a size string: ``"50Gi"`` (binary), ``"1G"`` / ``"1GB"`` (decimal), ``"512"``.

    Units are k, M, G, T, P, E (powers of 1000) and Ki ... Ei (powers of 1024), case-insensitive,
    with an optional ``B``. Raises :class:`ValueError` for anything else, negatives and fractions of a
    byte.
    """
    if isinstance(value, bool):
        raise ValueError("a byte size is a number, not a boolean")
    if isinstance(value, int):
        amount = Decimal(value)
    elif isinstance(value, float):
        if not value.is_integer():
            raise ValueError("a byte size must be a whole number of bytes")
        amount = Decimal(int(value))
    elif isinstance(value, str):
        match = _SIZE.match(value.strip())
        if match is None:
            raise ValueError("expected a byte size such as 1048576, 512Mi, 50Gi or 1G")
        number, unit, binary, _ = match.groups()
        factor = (1024 if binary else 1000) ** _POWERS[(unit or "").lower()]
        amount = Decimal(number) * factor  # the pattern admits decimal digits only
    else:
        raise ValueError("expected a byte size such as 1048576, 512Mi, 50Gi or 1G")
    if amount != amount.to_integral_value():
        raise ValueError("a byte size must be a whole number of bytes")
    if amount < 0 or amount > _MAX_BYTES:
        raise ValueError("a byte size must be between 0 and 2^63-1")
    return int(amount)


def _byte_size(value: Any) -> int:
    try:
        return parse_byte_size(value)
    except ValueError as exc:
        raise PydanticCustomError("byte_size", str(exc)) from None


#: A byte count given as an int or a size string; always an ``int`` after validation.
ByteCount = Annotated[int, BeforeValidator(_byte_size), Field(ge=1)]


# -- errors -----------------------------------------------------------------------------------------


def field_path(loc: Sequence[str | int]) -> str:
    """A pydantic location as a dotted path (list indexes as numbers); ``$`` for the document."""
    return ".".join(str(part) for part in loc) or "$"


def problem(field: str, message: str, type_: str) -> Problem:
    return {"field": field, "problem": message, "type": type_}


def problem_details(exc: ValidationError) -> list[Problem]:
    """Field paths, messages and types of a pydantic error, without the rejected input values."""
    return [
        problem(field_path(err["loc"]), err["msg"], err["type"])
        for err in exc.errors(include_url=False, include_input=False, include_context=False)
    ]


def rule(loc: Sequence[str | int], type_: str, message: str) -> InitErrorDetails:
    """One violated rule at ``loc`` (relative to the model that checks it)."""
    # ``message`` is a template: keep braces out of it. The input is never the rejected value.
    return InitErrorDetails(type=PydanticCustomError(type_, message), loc=tuple(loc), input=None)


def raise_problems(title: str, problems: Iterable[InitErrorDetails]) -> None:
    """Raise the collected rule violations as one :class:`ValidationError`; nothing if none."""
    errors = list(problems)
    if errors:
        raise ValidationError.from_exception_data(title, errors)


# -- YAML -------------------------------------------------------------------------------------------

#: The deepest nesting of a catalog document (the JSON bound of every request body).
MAX_YAML_DEPTH = 128


class YamlRefused(yaml.MarkedYAMLError):
    """A catalog document uses what the catalog does not take; ``kind`` is the stable code."""

    def __init__(self, kind: str, problem: str, mark: Any) -> None:
        super().__init__(problem=problem, problem_mark=mark)
        self.kind = kind


class CatalogYamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader with the size of what aliases expand to bounded, and nesting bounded.

    An alias is a reference: a few hundred bytes of aliases of aliases ("billion laughs") expand
    to gigabytes once the document is stored as JSON (551 bytes took 6.6 s and stored 40 MB). Each
    node weighs 1 plus its scalar's length, an alias the whole weight of its anchor (aliases inside
    it included); past twice the document's own length (and 64 KiB) the document is refused while
    it is composed, in time linear in its text. An alias-free document never comes near that bound,
    and anchors reused a few times (``<<: *defaults``) keep working. The composer recurses once per
    level, so nesting is bounded before it could raise ``RecursionError``."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._weight = 0
        self._weights: dict[str, int] = {}
        self._budget = 2 * len(stream) + 64 * 1024

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent):
            self._weight += self._weights.get(str(event.anchor), 0)
            if self._weight > self._budget:
                message = f"aliases expand the document past {self._budget} bytes; reuse anchors, do not multiply them"
                raise YamlRefused("yaml_alias_expansion", message, event.start_mark)
            return super().compose_node(parent, index)
        if self._depth >= MAX_YAML_DEPTH:
            raise YamlRefused("yaml_too_deep", f"nested deeper than {MAX_YAML_DEPTH} levels", event.start_mark)
        before = self._weight
        self._depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        self._weight += 1 + (len(node.value) if isinstance(node, yaml.ScalarNode) else 0)
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            self._weights[str(anchor)] = self._weight - before
        return node


def load_yaml(text: str) -> dict[str, Any]:
    """The mapping of one YAML document; bad YAML or another shape is :class:`ValidationFailed` at
    ``$`` (``yaml_syntax``); aliases that multiply the document, or nesting past
    :data:`MAX_YAML_DEPTH`, are :class:`ValidationFailed` with the code ``yaml_alias_expansion`` /
    ``yaml_too_deep``."""
    try:
        data = yaml.load(text, Loader=CatalogYamlLoader)  # noqa: S506 - a SafeLoader subclass
    except YamlRefused as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ValidationFailed(
            f"document refused: {exc.problem}", code=exc.kind, details=[problem("$", f"{exc.problem}{where}", exc.kind)]
        ) from None
    except yaml.MarkedYAMLError as exc:
        # ``problem`` and the mark only: str(exc) quotes the document, which may hold secrets.
        where = (
            f" at line {exc.problem_mark.line + 1}, column {exc.problem_mark.column + 1}" if exc.problem_mark else ""
        )
        message = f"{exc.problem or 'invalid YAML'}{where}"
        raise ValidationFailed("document is not valid YAML", details=[problem("$", message, "yaml_syntax")]) from None
    except yaml.YAMLError:
        raise ValidationFailed(
            "document is not valid YAML", details=[problem("$", "invalid YAML", "yaml_syntax")]
        ) from None
    if not isinstance(data, dict):
        raise ValidationFailed(
            "document must be a mapping",
            details=[problem("$", "a catalog document is a YAML mapping with a kind", "not_a_mapping")],
        )
    return data
