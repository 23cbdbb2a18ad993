"""How a failed attempt is told: the error on one line, its causes, its traceback.

What a run records as a job's ``fail_reason`` and logs; never raises, whatever the
exception's ``__str__`` does.
"""

from __future__ import annotations

from durabl.runtime.tracebacks import format_failure_traceback


def is_interrupt(exc: BaseException | None) -> bool:
    """A ``BaseException`` that is not an ``Exception`` (``SystemExit``,
    ``KeyboardInterrupt``, ...): it still counts as a failed attempt, and an inline run
    raises it again once the attempt is recorded."""
    return exc is not None and not isinstance(exc, Exception)


def error_text(exc: BaseException) -> str:
    """``str(exc)``, or its ``repr`` when ``__str__`` raises, or a placeholder: a failure
    is recorded whatever the exception does when it is printed."""
    for render in (str, repr):
        try:
            return render(exc)
        except Exception:
            continue
    return f"<unprintable {type(exc).__name__}>"


def describe_error(exc: BaseException) -> str:
    """``Type: message``, the cause chain, then the traceback: what an operator needs.
    Never raises, whatever the exception's ``__str__`` does."""
    head = f"{type(exc).__name__}: {error_text(exc)}"
    if is_interrupt(exc):
        head += " (raised by the handler: counted as a failed attempt)"
    lines = [head]
    seen = {id(exc)}
    cause = exc.__cause__
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        lines.append(f"caused by {type(cause).__name__}: {error_text(cause)}")
        cause = cause.__cause__
    try:
        trace = format_failure_traceback(exc)  # durabl's own frames folded
    except Exception:
        trace = f"(the traceback of {type(exc).__name__} could not be formatted)"
    lines.append("")
    lines.append(trace.rstrip())
    return "\n".join(lines)
