"""The drafters' registry and their options (the interface they implement: `core.drafter`).

Each drafter registers under a name with its own options, a frozen dataclass `Options` whose fields
are made with `option(...)`: the CLI's flags, the server's `speculative` fields, `resolve` and the
benchmark all read them from the registry, so a new drafter is one new file.
"""

from __future__ import annotations

from dataclasses import field, fields
from typing import TYPE_CHECKING, Any, Callable

from ..core.drafter import Drafter
from ..errors import InvalidParameterError

if TYPE_CHECKING:
    from ..models import LoadedModel


def option(default: Any, help: str, parse: Callable[[str], Any] | None = None) -> Any:
    """A field of a drafter's `Options`: its default, the help text of its CLI flag (`--name`
    with dashes), and how the flag's text becomes a value when `type(default)` cannot (`parse`,
    raising ValueError on bad input)."""
    return field(default=default, metadata={"help": help, "parse": parse})


DRAFTERS: dict[str, type[Drafter]] = {}


def register(name: str) -> Callable[[type[Drafter]], type[Drafter]]:
    def add(cls: type[Drafter]) -> type[Drafter]:
        cls.name = name
        DRAFTERS[name] = cls
        return cls

    return add


def drafter_class(method: str) -> type[Drafter]:
    if method not in DRAFTERS:
        raise InvalidParameterError(
            f"unknown method {method!r} (choose from {', '.join(sorted(DRAFTERS))})"
        )
    return DRAFTERS[method]


def make_options(method: str, values: dict[str, Any]):
    """The `Options` of `method` from user values by field name; values for fields the drafter
    does not have (another drafter's) are ignored. Text values (from a CLI flag or a form) are
    parsed; the dataclass validates."""
    cls = drafter_class(method).Options
    given = {}
    for f in fields(cls):
        if values.get(f.name) is None:
            continue
        value, parse = values[f.name], f.metadata.get("parse")
        if isinstance(value, str) and parse is not None:
            try:
                value = parse(value)
            except ValueError:
                raise InvalidParameterError(
                    f"--{f.name.replace('_', '-')}: cannot read {value!r}") from None
        given[f.name] = value
    return cls(**given)


def option_fields() -> dict[str, list[tuple[str, Any]]]:
    """Every option of every registered drafter: name -> [(method, dataclass field)], for the
    CLI's flags and the server's fields (an option several drafters share appears once)."""
    found: dict[str, list[tuple[str, Any]]] = {}
    for method in sorted(DRAFTERS):
        for f in fields(DRAFTERS[method].Options):
            found.setdefault(f.name, []).append((method, f))
    return found


def create_drafter(method: str, model: "LoadedModel", options=None) -> Drafter:
    """The drafter registered as `method`, built with `options` (its Options; default: its
    defaults)."""
    cls = drafter_class(method)
    return cls.create(model, cls.Options() if options is None else options)
