"""``Forward``: a class attribute that makes a method of a part also a method of its
owner, with the part's signature and docstring (for mypy, ``inspect`` and ``help()``).
How :class:`durabl.JobQueue` stays a thin front over its parts (composition).

``takes_as``/``takes_like`` give a callable another's whole signature;
``keywords_after_*`` give it another's keyword-only parameters after its own positional
ones (``@durabl.job`` and ``queue.process`` both take ``DeclaredOptions``')."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

P = ParamSpec("P")
R = TypeVar("R")
A = TypeVar("A")
B = TypeVar("B")
S = TypeVar("S")


class Forward(Generic[P, R]):
    """``name = Forward("part", Part.name)`` in a class body: ``owner.name(...)`` calls
    ``owner.part.name(...)``. On the class it is ``Part.name`` itself."""

    def __init__(self, part: str, method: Callable[Concatenate[Any, P], R]) -> None:
        self.part = part
        self.method = method
        self.__doc__ = method.__doc__

    @overload
    def __get__(self, owner: None, cls: type[Any]) -> Callable[Concatenate[Any, P], R]: ...
    @overload
    def __get__(self, owner: object, cls: type[Any] | None = None) -> Callable[P, R]: ...
    def __get__(
        self, owner: object, cls: type[Any] | None = None
    ) -> Callable[P, R] | Callable[Concatenate[Any, P], R]:
        if owner is None:
            return self.method
        bound: Callable[P, R] = getattr(getattr(owner, self.part), self.method.__name__)
        return bound


def takes_as(
    source: Callable[P, Any],
) -> Callable[[Callable[..., R]], Callable[Concatenate[Any, P], R]]:
    """Give the decorated method (``self, *args, **kwargs``) the parameters of
    ``source``, for mypy and ``inspect``/``help()``: a signature written once where its
    values are checked, not listed again at every hop that passes them on."""
    params = list(inspect.signature(source).parameters.values())
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)

    def give(method: Callable[..., R]) -> Callable[Concatenate[Any, P], R]:
        returns = inspect.signature(method).return_annotation
        method.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [self_param, *params], return_annotation=returns
        )
        return method

    return give


def takes_like(source: Callable[P, Any]) -> Callable[[Callable[..., R]], Callable[P, R]]:
    """:func:`takes_as` for a plain function (no ``self``)."""
    params = inspect.signature(source).parameters.values()

    def give(function: Callable[..., R]) -> Callable[P, R]:
        returns = inspect.signature(function).return_annotation
        function.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            list(params), return_annotation=returns
        )
        return function

    return give


def keywords_after_one(
    source: Callable[P, Any],
) -> Callable[[Callable[Concatenate[A, ...], R]], Callable[Concatenate[A, P], R]]:
    """Give the decorated callable (one positional parameter, then ``**options``) the
    keyword-only parameters of ``source`` (a ``kw_only`` dataclass, or a function of
    keyword-only parameters) as its options, for mypy and ``inspect``/``help()``: options
    written once, taken by several calls that differ in what comes before them."""
    return functools.partial(_with_keywords, source)


def keywords_after_two(
    source: Callable[P, Any],
) -> Callable[[Callable[Concatenate[S, A, ...], R]], Callable[Concatenate[S, A, P], R]]:
    """:func:`keywords_after_one` for two positional parameters (``self, a``)."""
    return functools.partial(_with_keywords, source)


def keywords_after_three(
    source: Callable[P, Any],
) -> Callable[[Callable[Concatenate[S, A, B, ...], R]], Callable[Concatenate[S, A, B, P], R]]:
    """:func:`keywords_after_one` for three positional parameters (``self, a, b``)."""
    return functools.partial(_with_keywords, source)


def _with_keywords(source: Callable[..., Any], function: Callable[..., R]) -> Any:
    own = inspect.signature(function)
    keywords = list(inspect.signature(source).parameters.values())
    if any(param.kind is not inspect.Parameter.KEYWORD_ONLY for param in keywords):
        raise TypeError(f"{source!r} must take keyword-only parameters only")
    positional = [p for p in own.parameters.values() if p.kind is not p.VAR_KEYWORD]
    function.__signature__ = own.replace(  # type: ignore[attr-defined]
        parameters=[*positional, *keywords]
    )
    return function
