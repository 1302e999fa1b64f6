"""One loader for every settings dataclass: keyword arguments, CLI ``key=value`` pairs and YAML
files all pass through ``load_config``, so each option has one default and one type.
"""

from __future__ import annotations

import difflib
import functools
import types
import typing
from collections.abc import Mapping
from dataclasses import fields
from typing import Any, TypeVar, get_args, get_origin

from .errors import ConfigError

T = TypeVar("T")

_TRUE = {"true", "yes", "1", "on"}
_FALSE = {"false", "no", "0", "off"}
_NONE = {"none", "null", ""}


def suggest(name: str, known: typing.Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest known name, or an empty string."""
    hint = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {hint[0]!r}?)" if hint else ""


def load_config(cls: type[T], values: Mapping[str, object], source: str) -> T:
    """Build the frozen dataclass ``cls`` from ``values``, rejecting unknown keys.

    Strings (from the CLI or a YAML file) are converted to each field's annotated type.

    Raises:
        ConfigError: an unknown key (with a did-you-mean) or a value of the wrong type; the
            message names ``source`` (``"model.train()"``, ``"command line"``, a file).
    """
    hints, known = _schema(cls)  # type: ignore[arg-type]  # a class is hashable
    for key in values:
        if key not in known:
            raise ConfigError(f"{source}: unknown option {key!r}{suggest(key, known)}; "
                              f"valid options: {', '.join(sorted(known))}")
    converted = {key: coerce(value, hints[key], key, source) for key, value in values.items()}
    return cls(**converted)


@functools.cache
def _schema(cls: type) -> tuple[dict[str, Any], frozenset[str]]:
    """A settings class's field types and names: resolving the string annotations costs about a
    millisecond per call, which every ``model(image)`` would pay again."""
    return typing.get_type_hints(cls), frozenset(f.name for f in fields(cls))


def coerce(value: object, annotation: Any, key: str, source: str) -> object:
    """Convert ``value`` to ``annotation`` (bool/int/float/str/None/Literal/unions/lists)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if annotation is Any or annotation is object:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.strip().lower() in _NONE and type(None) in args):
            if type(None) in args:
                return None
        errors = []
        for option in (a for a in args if a is not type(None)):
            try:
                return coerce(value, option, key, source)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(f"{source}: {key}={value!r} is not valid: expected {_describe(annotation)}")
    if origin is typing.Literal:
        for option in args:
            if value == option or (isinstance(value, str) and str(option) == value.strip()):
                return option
            if isinstance(option, bool) and isinstance(value, str) and value.strip().lower() in (
                    _TRUE if option else _FALSE):
                return option
        raise ConfigError(f"{source}: {key}={value!r} is not one of {', '.join(map(repr, args))}")
    if origin is dict:
        return _coerce_dict(value, args, key, source)
    if origin in (list, tuple):
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list | tuple):
            raise ConfigError(f"{source}: {key}={value!r} must be a list (comma-separated on the command line)")
        item_type = args[0] if args else Any
        out = [coerce(v.strip() if isinstance(v, str) else v, item_type, key, source) for v in items]
        return tuple(out) if origin is tuple else out
    if annotation is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise ConfigError(f"{source}: {key}={value!r} must be true or false")
    if annotation is int:
        if isinstance(value, bool):
            raise ConfigError(f"{source}: {key}={value!r} must be a whole number")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
        raise ConfigError(f"{source}: {key}={value!r} must be a whole number")
    if annotation is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                pass
        raise ConfigError(f"{source}: {key}={value!r} must be a number")
    if annotation is str:
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return str(value)
        if hasattr(value, "__fspath__"):
            return str(value)
        raise ConfigError(f"{source}: {key}={value!r} must be a string")
    if isinstance(annotation, type) and isinstance(value, annotation):
        return value
    raise ConfigError(f"{source}: {key}={value!r} must be {_describe(annotation)}")


def _coerce_dict(value: object, args: tuple[Any, ...], key: str, source: str) -> dict[Any, Any]:
    """A mapping, or ``"a:1,b:2"`` from the command line."""
    if isinstance(value, str):
        pairs = [part.split(":", 1) for part in value.split(",") if part.strip()]
        if any(len(p) != 2 for p in pairs):
            raise ConfigError(f"{source}: {key}={value!r} must be name:value pairs separated by commas, e.g. a:1,b:2")
        value = {k.strip(): v.strip() for k, v in pairs}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{source}: {key}={value!r} must be a mapping (name:value pairs on the command line)")
    key_type, value_type = args if len(args) == 2 else (Any, Any)
    return {coerce(k, key_type, key, source): coerce(v, value_type, key, source) for k, v in value.items()}


def _describe(annotation: Any) -> str:
    args = get_args(annotation)
    if get_origin(annotation) in (list, tuple) and args:
        return f"a list of {_describe(args[0])}"
    if args:
        return " or ".join(_describe(a) for a in args)
    return "None" if annotation is type(None) else getattr(annotation, "__name__", str(annotation))
