"""``Forward``: a class attribute that makes a method of a part also a method of its
owner, with the part's signature and docstring (for mypy, ``inspect`` and ``help()``).
How :class:`durabl.JobQueue` stays a thin front over its parts (composition)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

P = ParamSpec("P")
R = TypeVar("R")


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
