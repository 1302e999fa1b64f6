"""From what a user passes to ``LibreYOLO(...)`` to what the facade builds.

Accepted: a checkpoint path, a weights name (``LibreYOLO9t.pt``: local, then the weights folder,
then the hub download of the family's weights table), an architecture spec (``LibreYOLO9t.yaml``:
a file with ``family``/``size``/``task``/``nc``/``names``/``imgsz`` keys, or just that name), or
nothing with ``family=`` (an untrained model). The checkpoint's own metadata is authoritative;
the file name is the fallback.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import torch
import yaml
from torch import Tensor

from ..checkpoint import extract_state_dict, load_checkpoint
from ..config import suggest
from ..contract.spec import FamilySpec
from ..errors import CheckpointError, ConfigError, LibreYOLOError, UnknownFamilyError
from ..hub import resolve_weights
from .registry import ParsedName, families, get_family, has_family_prefix, parse_model_name

ARCH_KEYS = ("family", "size", "task", "nc", "names", "imgsz", "keypoints")
T = TypeVar("T")


@dataclass
class ModelSource:
    """Everything needed to build a model; ``state`` is None for an untrained one."""

    spec: FamilySpec
    size: str
    task: str
    nc: int
    names: Mapping[int, str] | list[str] | None
    imgsz: int | None
    state: dict[str, Tensor] | None = None
    checkpoint: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    keypoints: int | None = None  # pose: keypoints per instance (None: the task's default)


def is_arch_spec(model: object) -> bool:
    return isinstance(model, str | Path) and Path(model).suffix.lower() in (".yaml", ".yml")


def resolve_source(model: str | Path | None, *, family: str | FamilySpec | None = None, size: str | None = None,
                   task: str | None = None, nc: int | None = None,
                   names: Mapping[int, str] | list[str] | None = None, imgsz: int | None = None,
                   keypoints: int | None = None) -> ModelSource:
    """Decide what to build. Raises ConfigError / CheckpointError / WeightsNotFoundError with the fix."""
    wanted = get_family(family) if isinstance(family, str) else family
    if isinstance(model, str | Path):
        if not str(model).strip():
            raise ConfigError(f"model={str(model)!r} is empty; pass a checkpoint path, a weights name such as "
                              "'LibreYOLO9t.pt', or an architecture such as 'LibreYOLO9t.yaml'")
        model = Path(model).expanduser() if str(model).startswith("~") else model
    if model is None:
        if wanted is None:
            raise ConfigError("LibreYOLO() needs a model: a checkpoint path, a weights name such as "
                              "'LibreYOLO9t.pt', an architecture such as 'LibreYOLO9t.yaml', or family= with size=")
        return _untrained(wanted, size=size, task=task, nc=nc, names=names, imgsz=imgsz, keypoints=keypoints,
                          source="arguments")
    if is_arch_spec(model):
        arch = _read_arch_spec(Path(model), wanted)
        spec = arch.pop("spec")
        if task is not None and arch.get("task", task) != task:
            raise ConfigError(f"{model}: names task {arch['task']!r} but task={task!r} was given; drop one "
                              f"(e.g. LibreYOLO({spec.weight_name(arch.get('size') or spec.default_size, suffix='.yaml')!r}, "
                              f"task={task!r}))")
        return _untrained(spec, size=arch.get("size", size), task=arch.get("task", task),
                          nc=arch.get("nc", nc), names=arch.get("names", names), imgsz=arch.get("imgsz", imgsz),
                          keypoints=arch.get("keypoints", keypoints), source=str(model))
    if size is not None or nc is not None or names is not None or keypoints is not None:
        raise ConfigError(f"size/nc/names/keypoints describe an untrained model; {str(model)!r} is a weights file "
                          "whose checkpoint sets them")
    return _from_weights(model, wanted, task=task, imgsz=imgsz)


def _untrained(spec: FamilySpec, *, size: str | None, task: str | None, nc: int | None,
               names: Mapping[int, str] | list[str] | None, imgsz: int | None, source: str,
               keypoints: int | None = None) -> ModelSource:
    size = size or spec.default_size
    task = task or spec.default_task
    spec.check_size(str(size), task, source)
    if nc is None:
        nc = len(names) if names is not None else spec.task(task).default_nc
    if keypoints is not None:
        if spec.task(task).default_keypoints is None:
            raise ConfigError(f"{source}: keypoints={keypoints!r} sets a pose model's keypoints per object; this "
                              f"{spec.display_name} model's task is {task!r}")
        if isinstance(keypoints, bool) or not isinstance(keypoints, int) or keypoints < 1:
            raise ConfigError(f"{source}: keypoints={keypoints!r} must be a whole number of at least 1 (COCO's "
                              f"person has {spec.task(task).default_keypoints})")
    return ModelSource(spec, size, task, nc, names, imgsz, keypoints=keypoints)


def _read_arch_spec(path: Path, wanted: FamilySpec | None) -> dict[str, Any]:
    """An architecture spec: a YAML file (safe_load) or just a name like ``LibreYOLO9t.yaml``."""
    if path.is_file():
        try:
            with path.open() as fh:
                data = yaml.safe_load(fh) or {}
        except yaml.YAMLError as err:
            raise ConfigError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a mapping with {'/'.join(ARCH_KEYS)} keys")
        unknown = sorted(set(data) - set(ARCH_KEYS))
        if unknown:
            raise ConfigError(f"{path}: unknown key {unknown[0]!r}" + suggest(unknown[0], ARCH_KEYS))
        if "family" in data:
            spec = get_family(str(data.pop("family")))
        elif wanted is not None:
            spec = wanted
        else:
            parsed = parse_model_name(path.name)
            spec, data = parsed.family, {**_name_fields(parsed), **data}
        if wanted is not None and spec.name != wanted.name:
            raise ConfigError(f"{path}: family {spec.name!r} does not match family={wanted.name!r}")
        return {"spec": spec, **data}
    parsed = parse_model_name(path.name)
    if wanted is not None and parsed.family.name != wanted.name:
        raise UnknownFamilyError(f"{path.name!r} names family {parsed.family.name!r}, not {wanted.name!r}")
    return {"spec": parsed.family, **_name_fields(parsed)}


def _name_fields(parsed: ParsedName) -> dict[str, Any]:
    """What an architecture's file name says: its size, and its task when it has a task suffix
    (``LibreECs-pose.yaml``); a name without one leaves the task to ``task=`` (or the default)."""
    return {"size": parsed.size, **({"task": parsed.task} if parsed.named_task else {})}


def _from_weights(model: str | Path, wanted: FamilySpec | None, *, task: str | None,
                  imgsz: int | None) -> ModelSource:
    name = Path(str(model)).name
    guess = None
    try:
        guess = parse_model_name(name)
    except UnknownFamilyError:
        if has_family_prefix(name) and not Path(str(model)).exists():
            raise  # a family's name with a size or task it does not have: say so, don't download
    family_hint = wanted or (guess.family if guess else None)
    entry = guess.family.weights_entry(guess.size, guess.task) if guess else None
    note = f". {family_hint.weights_note}" if family_hint is not None and family_hint.weights_note else ""
    path = resolve_weights(model, entry=entry, untrained_hint=_untrained_hint(guess, family_hint) + note)
    ckpt = load_checkpoint(path)
    spec = _checkpoint_family(ckpt, family_hint, path)
    ckpt_task = str(ckpt.get("task") or task or (guess.task if guess and guess.family is spec else spec.default_task))
    raw_state = extract_state_dict(ckpt, str(path))
    state = _ask_family(lambda: spec.family_class().remap_state(raw_state), spec, ckpt_task, raw_state, path)
    if task is not None and task != ckpt_task:
        raise CheckpointError(f"{path}: checkpoint is for task {ckpt_task!r}, not task={task!r}")
    if ckpt_task not in spec.tasks:
        raise CheckpointError(f"{path}: task {ckpt_task!r} is not supported by {spec.display_name} "
                              f"(tasks: {', '.join(spec.tasks)})")
    impl = spec.family_class()
    size = (ckpt.get("size") or _ask_family(lambda: impl.infer_size(state, ckpt_task), spec, ckpt_task, state, path)
            or (guess.size if guess else None))
    if size is None:
        raise foreign_state_error(spec, ckpt_task, state, path)
    if size not in spec.sizes_for(ckpt_task):
        raise CheckpointError(f"{path}: size {size!r} is not a {spec.display_name} {ckpt_task} size "
                              f"({', '.join(spec.sizes_for(ckpt_task))})")
    nc = int(ckpt.get("nc") or _ask_family(lambda: impl.infer_nc(state, ckpt_task), spec, ckpt_task, state, path))
    keypoints = ckpt.get("num_keypoints") or _ask_family(lambda: impl.infer_keypoints(state, ckpt_task), spec,
                                                         ckpt_task, state, path)
    return ModelSource(spec, str(size), ckpt_task, nc, ckpt.get("names"), imgsz or ckpt.get("imgsz"),
                       state, ckpt, Path(path), keypoints=None if keypoints is None else int(keypoints))


def _ask_family(question: Callable[[], T], spec: FamilySpec, task: str, state: Mapping[str, Tensor],
                path: Path) -> T:
    """Run a family's reading of a state dict; a lookup that fails means foreign weights: say so."""
    try:
        return question()
    except LibreYOLOError:
        raise
    except (KeyError, IndexError, AttributeError, ValueError, TypeError) as err:
        raise foreign_state_error(spec, task, state, path) from err


def foreign_state_error(spec: FamilySpec, task: str, state: Mapping[str, Tensor], path: Path | str) -> CheckpointError:
    """The error for weights that are not ``spec``'s network: which keys it lacks, which are foreign."""
    own = _reference_keys(spec, task)
    missing = [k for k in own if k not in state]
    foreign = [k for k in state if k not in own]
    facts = (f"{len(missing)} of its {len(own)} keys are missing (e.g. {missing[:3]}) and "
             f"{len(foreign)} of the file's {len(state)} keys are not {spec.display_name}'s (e.g. {foreign[:3]})"
             if own else f"the file's keys (e.g. {list(state)[:3]}) are not {spec.display_name}'s")
    return CheckpointError(
        f"{path}: these weights are not a {spec.display_name} {task} network: {facts}. A state dict of another "
        f"architecture cannot be loaded into {spec.display_name}; pass a {spec.display_name} checkpoint, or "
        f"train one from LibreYOLO({spec.weight_name(spec.default_size, task, '.yaml')!r})")


def _reference_keys(spec: FamilySpec, task: str) -> list[str]:
    """The state-dict keys of the family's default size (built without memory where torch allows)."""
    impl = spec.family_class()
    try:
        with torch.device("meta"):
            net = impl(spec, spec.default_size, task, 80).build_network()
    except Exception:  # noqa: BLE001 - a network that cannot be built on "meta": build it for real
        try:
            net = impl(spec, spec.default_size, task, 80).build_network()
        except Exception:  # noqa: BLE001 - the message then lists the file's keys only
            return []
    return list(net.state_dict())


def _checkpoint_family(ckpt: Mapping[str, Any], hint: FamilySpec | None, path: Path) -> FamilySpec:
    if "model_family" in ckpt:
        name = str(ckpt["model_family"])
        if name not in families():
            raise CheckpointError(f"{path}: checkpoint is for family {name!r}, which this version of libreyolo does "
                                  f"not know (families: {', '.join(sorted(families()))}); upgrade libreyolo or "
                                  "register the family (libreyolo_models.register_family)")
        spec = families()[name]
        if hint is not None and hint.name != spec.name:
            raise CheckpointError(f"{path}: checkpoint is for family {spec.name!r}, not {hint.name!r}; "
                                  f"load it with LibreYOLO({str(path)!r})")
        return spec
    if hint is None:
        known = ", ".join(sorted(families()))
        raise UnknownFamilyError(f"{str(path)!r} has no 'model_family' entry and its name does not say which "
                                 f"family it is; pass family=, e.g. LibreYOLO({str(path)!r}, family='yolo9') "
                                 f"(families: {known})")
    return hint


def _untrained_hint(guess: Any, spec: FamilySpec | None) -> str:
    if guess is not None:
        return (f"LibreYOLO({guess.family.weight_name(guess.size, guess.task, '.yaml')!r}) or "
                f"LibreYOLO(family={guess.family.name!r}, size={guess.size!r}, nc=...)")
    spec = spec or next(iter(families().values()))
    return (f"LibreYOLO({spec.weight_name(spec.default_size, suffix='.yaml')!r}) or "
            f"LibreYOLO(family={spec.name!r}, size={spec.default_size!r}, nc=...)")


def rebuild_source(ckpt: dict[str, Any], path: str | None) -> ModelSource:
    """A model's own checkpoint dict (``state_for_checkpoint``) back into a source, in memory."""
    spec = get_family(str(ckpt["model_family"]))
    state = extract_state_dict(ckpt, path or "a pickled model")
    keypoints = ckpt.get("num_keypoints")
    return ModelSource(spec, str(ckpt["size"]), str(ckpt["task"]), int(ckpt["nc"]), ckpt.get("names"),
                       ckpt.get("imgsz"), state, {}, Path(path) if path else None,
                       keypoints=None if keypoints is None else int(keypoints))
