"""Command-line words -> a command name and a dict of options.

Forms: ``key=value`` (the Ultralytics style), ``--flag`` (True), ``--no-flag`` (False) and
``--key=value``. Dashes in keys become underscores (``--cuda-graph`` is ``cuda_graph``). Values
stay strings here; the settings dataclasses convert them by their annotations.
"""

from __future__ import annotations

from dataclasses import dataclass


class UsageError(ValueError):
    """The command line itself is wrong (exit code 2)."""


# Commands that take one bare word after their name (``libreyolo cache clean``).
ACTIONS = {"cache": ("list", "clean")}


@dataclass(frozen=True)
class ParsedArgs:
    command: str | None
    options: dict[str, object]
    action: str | None = None


def parse_words(words: list[str]) -> ParsedArgs:
    """Split the words; an empty value (``model=``) is an error here, not a default later."""
    command = None
    action = None
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
        elif action is None and command in ACTIONS:
            if word not in ACTIONS[command]:
                raise UsageError(f"'libreyolo {command}' takes one of {', '.join(ACTIONS[command])}, not {word!r}")
            action = word
        else:
            raise UsageError(f"unexpected word {word!r}: options are written key=value or --flag "
                             f"(e.g. model={word} or source={word})")
    return ParsedArgs(command, options, action)


def _put(options: dict[str, object], key: str, value: object, word: str) -> None:
    key = key.replace("-", "_")
    if isinstance(value, str) and not value.strip():
        raise UsageError(f"{word!r}: option {key!r} has no value; give one (e.g. {key}=...) or leave the "
                         "option out to use its default")
    if key in options:
        raise UsageError(f"option {key!r} given twice (second time as {word!r})")
    options[key] = value
