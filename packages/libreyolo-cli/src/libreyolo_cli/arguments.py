"""Command-line words -> a command name and a dict of options.

Forms: ``key=value`` (the Ultralytics style), ``--flag`` (True), ``--no-flag`` (False) and
``--key=value``. Dashes in keys become underscores (``--cuda-graph`` is ``cuda_graph``). Values
stay strings here; the settings dataclasses convert them by their annotations.
"""

from __future__ import annotations

from dataclasses import dataclass


class UsageError(ValueError):
    """The command line itself is wrong (exit code 2)."""


@dataclass(frozen=True)
class ParsedArgs:
    command: str | None
    options: dict[str, object]


def parse_words(words: list[str]) -> ParsedArgs:
    command = None
    options: dict[str, object] = {}
    for word in words:
        if word.startswith("--"):
            body = word[2:]
            if "=" in body:
                key, value = body.split("=", 1)
                _put(options, key, value, word)
            elif body.startswith("no-"):
                _put(options, body[3:], False, word)
            elif body:
                _put(options, body, True, word)
            else:
                raise UsageError("a bare '--' is not an option")
        elif "=" in word:
            key, value = word.split("=", 1)
            if not key:
                raise UsageError(f"{word!r}: missing the option name before '='")
            _put(options, key, value, word)
        elif command is None:
            command = word
        else:
            raise UsageError(f"unexpected word {word!r}: options are written key=value or --flag "
                             f"(e.g. model={word} or source={word})")
    return ParsedArgs(command, options)


def _put(options: dict[str, object], key: str, value: object, word: str) -> None:
    key = key.replace("-", "_")
    if key in options:
        raise UsageError(f"option {key!r} given twice (second time as {word!r})")
    options[key] = value
