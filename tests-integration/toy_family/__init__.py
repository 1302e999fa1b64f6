"""A test-only detector family, outside the zoo's package: the proof that the family contract is
all a new family needs (this folder, plus one ``register_family`` call)."""

from .spec import SPEC

__all__ = ["SPEC"]
