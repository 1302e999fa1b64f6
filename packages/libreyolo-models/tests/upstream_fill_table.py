"""Deterministic upstream weights filled by the rules a ``fill-<name>.tsv`` table names per entry.

``upstream_fill.fill_weights`` decides each entry's rule from the owning module's class name, as
upstream's generator did; networks whose norm classes are named otherwise (RF-DETR's channel
LayerNorm, EC's) read the rule from the shared table instead, which also checks that the state
dict's keys come in upstream's order. The base sequences are ``upstream_fill``'s.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
from upstream_fill import DATA, GAINS, base_sequence


def read_fill_table(name: str) -> list[list[str]]:
    """Rows of ``fill-<name>.tsv`` (index, key, shape, dtype, rule, alias_of, checksums...)."""
    lines = (DATA / f"fill-{name}.tsv").read_text().splitlines()
    return [line.split("\t") for line in lines if not line.startswith("#")]


def fill_from_table(model: nn.Module, name: str, variant: str = "hash") -> None:
    """Overwrite every state-dict entry of ``model`` by the table's rule (in place)."""
    rows = read_fill_table(name)
    state = model.state_dict()
    if [r[1] for r in rows] != list(state):
        raise AssertionError(f"state-dict keys differ from fill-{name}.tsv")
    filled: dict[str, torch.Tensor] = {}
    for row in rows:
        i, key, rule, alias = int(row[0]), row[1], row[4], row[5]
        value = state[key]
        if rule in ("int_untouched", "bool_untouched"):
            filled[key] = value.clone()
            continue
        if rule == "alias":
            filled[key] = filled[alias]
            continue
        s = base_sequence(variant, i, value.numel())
        if rule == "bn_running_var":
            out = np.float32(1) + np.float32(0.5) * np.abs(s)
        elif rule == "norm_weight":
            out = np.float32(1) + np.float32(0.1) * s
        elif rule.startswith("fan_in="):
            out = s * np.float32(GAINS[variant] / math.sqrt(float(rule.split("=")[1])))
        elif rule == "small":
            out = s * np.float32(0.1)
        else:
            raise AssertionError(f"unknown fill rule {rule!r} for {key}")
        filled[key] = torch.from_numpy(out.reshape(tuple(value.shape)))
    model.load_state_dict(filled)


def check_fill_checksums(model: nn.Module, name: str, variant: str = "hash", every: int = 1) -> None:
    """Each (sampled) entry's float64 sum and first value equal the table's."""
    rows = read_fill_table(name)
    state = model.state_dict()
    column = {"sine": (7, 8), "hash": (10, 11)}[variant]
    for row in rows[::every]:
        key, total, first = row[1], row[column[0]], row[column[1]]
        if not first:
            continue
        value = state[key]
        assert value.flatten()[0].item() == float(first), key
        assert math.isclose(value.double().sum().item(), float(total), rel_tol=1e-9, abs_tol=1e-9), key
