"""A toy task (``count``: how many objects an image holds) and a toy family that implements it,
defined outside the zoo and joined through ``register_task`` / ``register_family`` only: the
proof that a new task needs no edit of the zoo (``docs/adding-a-task.md``)."""

from .spec import SPEC
from .task import CountTask

__all__ = ["SPEC", "CountTask"]
