"""Payload schemas: a declared type's ``schema=``, checked by pydantic v2's ``TypeAdapter``.

pydantic is imported only when a schema is declared (the ``durabl[schemas]`` extra), so
``import durabl`` never loads it. At enqueue the payload is validated and stored as the
JSON-mode dump of the validated value (portable on every store); at run the stored data is
validated again and the handler gets the parsed value. durabl writes no validator of its
own: every check is pydantic's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from durabl.model.exceptions import DurablError


@dataclass(frozen=True)
class PayloadIssue:
    """One thing wrong with a payload: where (``loc``, pydantic's path) and what."""

    loc: tuple[str | int, ...]
    message: str

    @property
    def location(self) -> str:
        """The path as text, ``items.0.sku``; ``(root)`` for the payload itself."""
        return ".".join(str(part) for part in self.loc) or "(root)"

    def __str__(self) -> str:
        return f"{self.location}: {self.message}"


class PayloadValidationError(DurablError, ValueError):
    """A payload that does not match its type's declared schema. ``errors`` lists every
    issue (:class:`PayloadIssue`: ``loc``, ``location`` and ``message``); at enqueue
    nothing was written."""

    def __init__(self, type: str, errors: tuple[PayloadIssue, ...]) -> None:
        self.type = type
        self.errors = errors
        super().__init__(describe_issues(type, errors))


def describe_issues(type: str, errors: tuple[PayloadIssue, ...]) -> str:
    """The message of a :class:`PayloadValidationError` (and an ``invalid-payload``
    failure's reason): every issue, one a line."""
    count = f"{len(errors)} issue" + ("" if len(errors) == 1 else "s")
    lines = [f"payload of job type {type!r} does not match its schema ({count}):"]
    lines += [f"  - {issue}" for issue in errors]
    return "\n".join(lines)


class PayloadSchema:
    """A schema as declared (``schema=``) with the pydantic ``TypeAdapter`` built for it.

    ``TypeError`` at construction when pydantic is not installed or cannot build a
    validator for ``schema`` (so a bad ``schema=`` fails at the declaration)."""

    def __init__(self, schema: Any) -> None:
        self.schema = schema
        try:
            import pydantic
        except ImportError:  # pragma: no cover - the extra is installed in the test env
            raise TypeError(
                "schema= needs pydantic v2: install durabl[schemas] (pip install pydantic)"
            ) from None
        try:
            self._adapter: Any = pydantic.TypeAdapter(schema)
        except pydantic.PydanticUserError as exc:
            raise TypeError(f"schema={schema!r} cannot be used: pydantic says {exc}") from exc
        except Exception as exc:  # anything else pydantic refuses to adapt
            raise TypeError(
                f"schema={schema!r} cannot be used: pydantic cannot validate it "
                f"({type(exc).__name__}: {exc})"
            ) from exc
        self._validation_error: type[Exception] = pydantic.ValidationError

    def __repr__(self) -> str:
        return f"PayloadSchema({getattr(self.schema, '__name__', self.schema)!r})"

    def parse(self, type: str, data: Any) -> Any:
        """The validated value of ``data`` (a model instance for a model);
        :class:`PayloadValidationError` listing every issue otherwise."""
        try:
            return self._adapter.validate_python(data)
        except self._validation_error as exc:
            raise PayloadValidationError(type, _issues(exc)) from None

    def to_stored(self, type: str, data: Any) -> Any:
        """What an enqueue stores for ``data``: the JSON-mode dump of its validated value
        (a model instance given as ``data`` is validated too, then dumped)."""
        return self._adapter.dump_python(self.parse(type, data), mode="json")


def _issues(exc: Any) -> tuple[PayloadIssue, ...]:
    return tuple(
        PayloadIssue(tuple(error.get("loc", ())), str(error.get("msg", "invalid")))
        for error in exc.errors(include_url=False)
    )
