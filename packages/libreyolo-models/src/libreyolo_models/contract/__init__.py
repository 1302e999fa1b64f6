"""The family contract: what every family implements and declares (``family``: the protocol the
jobs call; ``spec``: the declarations as data; ``detector`` / ``classifier``: the glue a kind of
family shares). Families import from here and from ``layers``; nothing here imports a family.

Kept import-free: a family's ``spec.py`` imports ``contract.spec`` without pulling in torch.
"""
