"""SGD, Adam and AdamW stepped by torch's fused kernels, without ``torch.optim``'s compiler import.

``torch.optim.Optimizer`` imports ``torch._dynamo`` the first time its constructor, ``step``,
``zero_grad`` or ``state_dict`` runs (they are wrapped to keep ``torch.compile`` from tracing into
them): 4.7 s of a training run's setup on an H200 machine's CPU with its bytecode compiled, more
than any other phase of our setup, and ~11 s on a small machine without. The update itself is
one ATen kernel per group and device/dtype (``torch._fused_sgd_``, ``torch._fused_adam_``,
``torch._fused_adamw_``, on CUDA and on the CPU), which this class calls with the arguments,
state and order that ``torch.optim.SGD/Adam/AdamW(fused=True)`` use: a step returns bit for bit
what theirs returns, and ``state_dict`` has their layout, so a checkpoint of either resumes into
the other (tests pin both). One deliberate difference: SGD's momentum buffers start zeroed, not
uninitialised, so a first step that the scaler skips for an overflow (common: its first scale is
2**16) leaves buffers that mean "no momentum yet" instead of whatever memory held (torch's
fused SGD then carries that garbage into the next step).

``GradScaler`` treats it as torch's fused optimizers: it hands over the scale and the inf flag as
tensors (``_step_supports_amp_scaling``), so a step skipped for an overflow never reads a value
back to the host.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any, cast

import torch
from torch import Tensor
from torch.utils._foreach_utils import _group_tensors_by_device_and_dtype

KINDS = ("SGD", "Adam", "AdamW")

# Each kind's options with torch.optim's defaults and names (a saved group carries all of them).
_DEFAULTS: dict[str, dict[str, Any]] = {
    "SGD": {"lr": 1e-3, "momentum": 0.0, "dampening": 0.0, "weight_decay": 0.0, "nesterov": False,
            "maximize": False, "foreach": None, "differentiable": False, "fused": True},
    "Adam": {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0, "amsgrad": False,
             "maximize": False, "foreach": None, "capturable": False, "differentiable": False, "fused": True,
             "decoupled_weight_decay": False},
}
_DEFAULTS["AdamW"] = {**_DEFAULTS["Adam"], "weight_decay": 1e-2, "decoupled_weight_decay": True}

# Options that name torch.optim's other code paths: this class is the fused path only.
_FIXED = {"fused": True, "foreach": None, "differentiable": False, "capturable": False}
# A key only groups of that kind carry: how a saved state dict's kind is told apart.
_KIND_KEY = {"SGD": "momentum", "Adam": "betas", "AdamW": "betas"}


class FusedOptimizer:
    """``torch.optim``'s fused SGD / Adam / AdamW over parameter groups (the same public surface
    the trainer, ``GradScaler`` and checkpoints use: ``param_groups``, ``state``, ``defaults``,
    ``step``, ``zero_grad``, ``state_dict``, ``load_state_dict``)."""

    _step_supports_amp_scaling = True  # GradScaler sets grad_scale / found_inf before step()
    grad_scale: Tensor  # set only around a step (GradScaler, the trainer's skip): read with getattr
    found_inf: Tensor

    def __init__(self, kind: str, groups: Iterable[dict[str, Any]], **options: Any) -> None:
        if kind not in KINDS:
            raise ValueError(f"optimizer kind {kind!r} is not one of {', '.join(KINDS)}")
        unknown = set(options) - set(_DEFAULTS[kind])
        if unknown:
            raise TypeError(f"{kind}: unknown options {sorted(unknown)}")
        changed = {k: v for k, v in options.items() if k in _FIXED and v != _FIXED[k]}
        if changed:
            raise ValueError(f"{kind}: {changed} is not supported: this optimizer always runs torch's fused kernels")
        self.kind = kind
        self.defaults: dict[str, Any] = {**_DEFAULTS[kind], **options}
        if kind == "SGD" and self.defaults["nesterov"] and (self.defaults["momentum"] <= 0
                                                           or self.defaults["dampening"] != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        self.state: defaultdict[Tensor, dict[str, Any]] = defaultdict(dict)
        self.param_groups: list[dict[str, Any]] = []
        for group in groups:
            self.add_param_group(group)

    def __repr__(self) -> str:
        return f"FusedOptimizer({self.kind}, {len(self.param_groups)} groups)"

    def add_param_group(self, group: dict[str, Any]) -> None:
        given = group["params"]
        params = [given] if isinstance(given, Tensor) else list(given)
        for p in params:
            if not (isinstance(p, Tensor) and p.is_leaf and p.dtype.is_floating_point):
                raise ValueError(f"{self.kind}: parameters must be floating-point leaf tensors, got "
                                 f"{getattr(p, 'dtype', type(p).__name__)}")
        if len({id(p) for p in params}) != len(params):
            raise ValueError("a parameter group lists the same parameter twice (it would be updated twice)")
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in params):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append({**self.defaults, **group, "params": params})

    # ------------------------------------------------------------------ stepping
    @torch.no_grad()
    def step(self) -> None:
        """One update of every parameter that has a gradient (skipped on device when the scaler
        found an inf: the kernels read ``found_inf``)."""
        grad_scale: Tensor | None = getattr(self, "grad_scale", None)
        found_inf: Tensor | None = getattr(self, "found_inf", None)
        for group in self.param_groups:
            for params in _by_device_and_dtype([p for p in group["params"] if p.grad is not None]):
                scale = None if grad_scale is None else grad_scale.to(params[0].device)
                inf = None if found_inf is None else found_inf.to(params[0].device)
                if self.kind == "SGD":
                    self._sgd(group, params, scale, inf)
                else:
                    self._adam(group, params, scale, inf)

    def _sgd(self, group: dict[str, Any], params: list[Tensor], grad_scale: Tensor | None,
             found_inf: Tensor | None) -> None:
        momentum = group["momentum"]
        if momentum == 0:
            self._sgd_kernel(group, params, [], False, grad_scale, found_inf)
            return
        saved = [self.state[p].get("momentum_buffer") for p in params]
        fresh = [p for p, b in zip(params, saved) if b is None]
        for p in fresh:  # zeroed, not empty: a skipped first step must leave "no momentum yet"
            self.state[p]["momentum_buffer"] = torch.zeros_like(cast(Tensor, p.grad))
        going = [p for p, b in zip(params, saved) if b is not None]
        # The kernel starts fresh buffers at their gradient (is_first_step); parameters with
        # momentum already (a resume, or one whose gradient came later) take the usual update.
        for subset, first in ((fresh, True), (going, False)):
            if subset:
                self._sgd_kernel(group, subset, [self.state[p]["momentum_buffer"] for p in subset], first,
                                 grad_scale, found_inf)

    @staticmethod
    def _sgd_kernel(group: dict[str, Any], params: list[Tensor], buffers: list[Tensor], first: bool,
                    grad_scale: Tensor | None, found_inf: Tensor | None) -> None:
        torch._fused_sgd_(params, _grads(params), buffers, weight_decay=group["weight_decay"],
                          momentum=group["momentum"], lr=group["lr"], dampening=group["dampening"],
                          nesterov=group["nesterov"], maximize=group["maximize"], is_first_step=first,
                          grad_scale=grad_scale, found_inf=found_inf)

    def _adam(self, group: dict[str, Any], params: list[Tensor], grad_scale: Tensor | None,
              found_inf: Tensor | None) -> None:
        amsgrad = group["amsgrad"]
        states = [self.state[p] for p in params]  # one lookup each: a tensor's hash is Python code
        for p, state in zip(params, states):
            if not state:  # torch's fused layout: a float32 step count on the parameter's device
                state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                if amsgrad:
                    state["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        steps = [s["step"] for s in states]
        torch._foreach_add_(steps, 1)
        kernel = torch._fused_adamw_ if group["decoupled_weight_decay"] else torch._fused_adam_
        beta1, beta2 = group["betas"]
        kernel(params, _grads(params), [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states],
               [s["max_exp_avg_sq"] for s in states] if amsgrad else [], steps, amsgrad=amsgrad, lr=group["lr"],
               beta1=float(beta1), beta2=float(beta2), weight_decay=group["weight_decay"], eps=group["eps"],
               maximize=group["maximize"], grad_scale=grad_scale, found_inf=found_inf)
        if found_inf is not None:  # a skipped step does not count
            torch._foreach_sub_(steps, [found_inf] * len(steps))

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            if set_to_none:
                for p in group["params"]:
                    p.grad = None
                continue
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.grad_fn is not None:
                    p.grad.detach_()
                else:
                    p.grad.requires_grad_(False)
                p.grad.zero_()

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """``torch.optim.Optimizer.state_dict``'s layout: parameters by their index over the groups."""
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            for p in group["params"]:
                index.setdefault(id(p), len(index))
            groups.append({**{k: v for k, v in group.items() if k != "params"},
                           "params": [index[id(p)] for p in group["params"]]})
        state = {index[id(p)]: dict(s) for p, s in self.state.items() if id(p) in index}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a ``state_dict`` of this class or of ``torch.optim``'s optimizer of the same kind
        (any of its code paths: a checkpoint of a foreach CPU run resumes into the fused kernels)."""
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self.param_groups):
            raise ValueError(f"the saved optimizer has {len(saved_groups)} parameter groups, this one "
                             f"{len(self.param_groups)}")
        if [len(g["params"]) for g in saved_groups] != [len(g["params"]) for g in self.param_groups]:
            raise ValueError("the saved optimizer's parameter groups differ in size from this one's")
        key = _KIND_KEY[self.kind]
        if any(key not in g for g in saved_groups):
            raise ValueError(f"the saved optimizer is not a {self.kind} (its groups have no {key!r}); resume with "
                             "the optimizer the run was started with")
        by_index = {i: p for saved, group in zip(saved_groups, self.param_groups)
                    for i, p in zip(saved["params"], group["params"])}
        state: defaultdict[Tensor, dict[str, Any]] = defaultdict(dict)
        for i, saved_state in state_dict["state"].items():
            if int(i) not in by_index:
                raise ValueError(f"the saved optimizer has state for parameter {i}, which none of its groups lists")
            p = by_index[int(i)]
            state[p] = {k: _like_parameter(k, v, p) for k, v in saved_state.items()}
        self.state = state
        # Keys older files lack come from the defaults; the code-path switches are this class's.
        self.param_groups = [{**self.defaults, **saved, **{k: v for k, v in _FIXED.items() if k in self.defaults},
                              "params": group["params"]}
                             for saved, group in zip(saved_groups, self.param_groups)]


def _like_parameter(key: str, value: Any, param: Tensor) -> Any:
    """A saved state value as the fused kernels want it beside ``param``: on its device, step
    counts float32, moments in its dtype and memory layout (a run saved in NCHW resumes in
    channels_last and the reverse; values are unchanged)."""
    if not torch.is_tensor(value):
        return value
    if key == "step":
        return value.to(dtype=torch.float32, device=param.device)
    if not value.is_floating_point():
        return value.to(device=param.device)
    return relaid_like(value, param, dtype=param.dtype)


def relaid_like(value: Tensor, param: Tensor, *, dtype: torch.dtype | None = None) -> Tensor:
    """``value`` (in ``dtype``, default its own) on ``param``'s device and, when the shapes match,
    in its strides: the fused kernels want each state tensor laid out like its parameter, and a
    checkpoint keeps the layout it was saved in (an NCHW run resumed in channels_last)."""
    dtype = dtype or value.dtype
    if value.shape == param.shape and value.stride() != param.stride():
        relaid = torch.empty_like(param, dtype=dtype)  # the parameter's strides
        relaid.copy_(value)
        return relaid
    return value.to(dtype=dtype, device=param.device)


def _grads(params: list[Tensor]) -> list[Tensor]:
    return [cast(Tensor, p.grad) for p in params]


def _by_device_and_dtype(params: list[Tensor]) -> list[list[Tensor]]:
    """Parameters split by (device, dtype), each bucket in the given order: one fused kernel call
    per bucket. Grouped in C++ (torch's own helper): a Python loop over YOLOv9-t's 675 tensors
    cost a measurable share of a host-bound step."""
    if not params:
        return []
    groups = _group_tensors_by_device_and_dtype([params])  # type: ignore[list-item]
    return [cast(list[Tensor], lists[0]) for lists, _ in groups.values()]


AnyOptimizer = FusedOptimizer | torch.optim.Optimizer
"""What the training step, the schedule and checkpoints accept (tests drive them with torch's)."""
