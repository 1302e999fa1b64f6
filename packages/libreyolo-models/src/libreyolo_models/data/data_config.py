"""Read a dataset description (``data.yaml``, a dict, or the bundled name ``shapes``).

The format is the one Ultralytics users already have::

    path: ../datasets/mydata      # dataset root (optional: defaults to the yaml's folder)
    train: images/train           # a folder, an image-list .txt, a COCO .json, or a list of those
    val: images/val               # optional (training with val=False needs none)
    test:                         # optional; blank means absent
    names: {0: cat, 1: dog}       # or a list [cat, dog]; nc, if given, must agree
    coco_images: images           # optional, COCO JSON splits only (see coco_reader)

Paths resolve like Ultralytics: a relative ``path`` against the yaml's folder (then, if that does
not exist, the working directory, where Ultralytics looks first), split entries against the
root; an entry ``../x`` that does not exist falls back to ``<root>/x``, which is what Roboflow
exports need. Existence is not checked here: a config used only for validation may name a train
folder that is not on this machine. ``load_split`` checks the split it is asked for.

Other keys (``download``, ``kpt_shape``, ``roboflow``...) are kept in ``DataConfig.extra``;
one that looks like a misspelt known key gets a warning.
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..errors import abbreviated
from .coco_json import read_coco_categories
from .errors import DataConfigError

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "test")
BUNDLED_NAMES = ("shapes", "shapes.yaml")
_KNOWN_KEYS = ("path", *SPLITS, "names", "nc", "coco_images")
_EXAMPLE = "path: datasets/mydata\ntrain: images/train\nval: images/val\nnames:\n  0: cat\n  1: dog"
_KEY_EXAMPLES = {"train": "train: images/train", "val": "val: images/val", "test": "test: images/test",
                 "names": "names: {0: cat, 1: dog}"}

SplitValue = Path | tuple[Path, ...] | None


@dataclass(frozen=True)
class DataConfig:
    """A parsed dataset description with every path resolved.

    Attributes:
        root: dataset root (absolute).
        train, val, test: the split's source as written: one path, or a tuple of paths for a
            list; None when the key is absent or blank. Use ``split_paths`` to get a tuple.
        names: class id -> name, ids exactly ``0 .. nc-1``.
        nc: number of classes.
        source: where this came from (the yaml path, or ``"data dict"``), for messages.
        coco_images: per split, the folder that COCO ``file_name`` entries are relative to.
        extra: keys this reader does not use, kept as written.
    """

    root: Path
    train: SplitValue
    val: SplitValue
    test: SplitValue
    names: dict[int, str]
    nc: int
    source: str
    coco_images: dict[str, Path] = field(default_factory=dict)
    extra: dict[str, object] = field(default_factory=dict)

    def split_paths(self, split: str) -> tuple[Path, ...]:
        """The split's sources as a tuple (one or more folders, lists or JSON files).

        Raises:
            DataConfigError: ``split`` is not train/val/test, or the description lacks it.
        """
        if split not in SPLITS:
            raise DataConfigError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
        value = getattr(self, split)
        if value is None:
            raise DataConfigError(f"{self.source}: no {split!r} key, so there is no {split} split; "
                                  f"add one, e.g. `{_KEY_EXAMPLES[split]}`")
        return value if isinstance(value, tuple) else (value,)


def load_data_config(data: str | os.PathLike[str] | Mapping[str, object] | DataConfig) -> DataConfig:
    """Parse a dataset description.

    Args:
        data: a ``data.yaml`` path, a folder holding ``data.yaml``, a dict with the same keys
            (relative paths then resolve against the working directory), the bundled name
            ``"shapes"`` (generated on first use, see ``shapes.ensure_shapes``), or an already
            loaded ``DataConfig`` (returned as is).

    Raises:
        DataConfigError: missing file, invalid YAML, missing or malformed keys.
    """
    if isinstance(data, DataConfig):
        return data
    if isinstance(data, Mapping):
        return _from_mapping(data, yaml_dir=None, source="data dict")
    if not isinstance(data, str | os.PathLike):
        raise DataConfigError(f"data={data!r} ({type(data).__name__}) is not a dataset; pass a "
                              "data.yaml path, a dict, or 'shapes'")
    path = Path(data).expanduser()
    try:
        if not path.exists() and os.fspath(data) in BUNDLED_NAMES:
            from .shapes import ensure_shapes  # lazy: generating is only needed when asked for

            path = ensure_shapes()
        if path.is_dir():
            path = _yaml_in_folder(path)
        found = path.is_file()
    except OSError as err:  # a name too long for the file system, a loop of links...
        raise DataConfigError(f"data={abbreviated(os.fspath(data))!r} cannot be read: {err.strerror or err}") from None
    if not found:
        hint = difflib.get_close_matches(os.fspath(data), BUNDLED_NAMES, n=1)
        raise DataConfigError(
            f"data={os.fspath(data)!r}: no such file or folder"
            + (f"; did you mean the bundled dataset {hint[0]!r}?" if hint else
               "; pass a data.yaml path, a folder holding data.yaml, or the bundled name 'shapes'"))
    path = _absolute(path)
    return _from_mapping(_read_yaml(path), yaml_dir=path.parent, source=os.fspath(path))


def _yaml_in_folder(folder: Path) -> Path:
    candidate = folder / "data.yaml"
    if candidate.is_file():
        return candidate
    others = sorted(p.name for p in folder.glob("*.y*ml"))
    raise DataConfigError(f"data={os.fspath(folder)!r} is a folder without data.yaml"
                          + (f"; it holds {', '.join(others)}: pass one of those" if others else
                             f"; write one there, for example:\n{_EXAMPLE}"))


def _read_yaml(path: Path) -> Mapping[str, object]:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise DataConfigError(f"{path}: cannot read ({err.strerror or err})") from err
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise DataConfigError(f"{path}: not valid YAML ({err}); fix the syntax, e.g.\n{_EXAMPLE}") from err
    if raw is None:
        raise DataConfigError(f"{path}: the file is empty; a data.yaml needs train, val and names, "
                              f"e.g.\n{_EXAMPLE}")
    if not isinstance(raw, Mapping):
        raise DataConfigError(f"{path}: expected key: value pairs, found a {type(raw).__name__}; "
                              f"e.g.\n{_EXAMPLE}")
    return raw


def _from_mapping(raw: Mapping[str, object], yaml_dir: Path | None, source: str) -> DataConfig:
    raw = {str(k): v for k, v in raw.items()}
    extra = {k: v for k, v in raw.items() if k not in _KNOWN_KEYS}
    for key in extra:
        hint = difflib.get_close_matches(key, _KNOWN_KEYS, n=1, cutoff=0.75)
        if hint:
            log.warning("%s: unknown key %r ignored; did you mean %r?", source, key, hint[0])
    root = _resolve_root(raw.get("path"), yaml_dir, source)
    splits = {s: _resolve_split(raw.get(s), s, root, source) for s in SPLITS}
    if splits["train"] is None:  # val is optional: training with val=False needs none
        raise DataConfigError(_missing_key(source, "train", extra))
    names = _parse_names(raw.get("names"), raw.get("nc"), source, _coco_jsons(splits))
    if names is None:
        raise DataConfigError(_missing_key(source, "names", extra))
    return DataConfig(root=root, train=splits["train"], val=splits["val"], test=splits["test"],
                      names=names, nc=len(names), source=source,
                      coco_images=_resolve_coco_images(raw.get("coco_images"), root, source),
                      extra=extra)


def _missing_key(source: str, key: str, extra: Mapping[str, object]) -> str:
    what = {"train": "the training images", "val": "the validation images", "names": "the class names"}[key]
    hint = difflib.get_close_matches(key, list(extra), n=1, cutoff=0.6)
    typo = f" (found {hint[0]!r}: a typo?)" if hint else ""
    return (f"{source}: missing key {key!r} ({what}){typo}. Add it, e.g. `{_KEY_EXAMPLES[key]}`; "
            f"a complete data.yaml looks like:\n{_EXAMPLE}")


def _resolve_root(value: object, yaml_dir: Path | None, source: str) -> Path:
    base = yaml_dir if yaml_dir is not None else Path.cwd()
    if value is None or value == "":
        return _absolute(base)
    if not isinstance(value, str | os.PathLike):
        raise DataConfigError(f"{source}: 'path' must be a folder path, got {value!r}")
    path = Path(value).expanduser()
    if path.is_absolute():
        return _absolute(path)
    beside_yaml = _absolute(base / path)
    from_cwd = _absolute(path)
    return from_cwd if not beside_yaml.exists() and from_cwd.exists() else beside_yaml


def _absolute(path: Path) -> Path:
    """Absolute and normalized, symlinks kept: a symlinked ``images/`` folder must still map to
    its sibling ``labels/`` folder, which resolving the link would break."""
    return Path(os.path.abspath(path))


def _resolve_split(value: object, split: str, root: Path, source: str) -> SplitValue:
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, str | os.PathLike):
        return _resolve_entry(value, root)
    if isinstance(value, list | tuple) and all(isinstance(v, str | os.PathLike) for v in value):
        return tuple(_resolve_entry(v, root) for v in value)
    raise DataConfigError(f"{source}: {split!r} must be a path or a list of paths (folders, image-list "
                          f".txt or COCO .json), got {value!r}; e.g. `{_KEY_EXAMPLES[split]}`")


def _resolve_entry(value: str | os.PathLike[str], root: Path) -> Path:
    text = os.fspath(value)
    path = Path(text).expanduser()
    if path.is_absolute():
        return _absolute(path)
    resolved = _absolute(root / path)
    if not resolved.exists() and text.startswith("../"):  # Roboflow exports: `train: ../train/images`
        inside = _absolute(root / text[3:])
        if inside.exists():
            return inside
    return resolved


def _parse_names(names: object, nc: object, source: str, coco_jsons: list[Path]) -> dict[int, str] | None:
    """Names as a list or an id -> name dict, else from COCO categories, else ``class<i>`` for
    a bare nc; None when there is nothing to go by."""
    count = None if nc is None else _parse_nc(nc, source)
    if names is None and coco_jsons:

        names = [name for _, name in read_coco_categories(coco_jsons[0])]
    if names is None:
        return None if count is None else {i: f"class{i}" for i in range(count)}
    if isinstance(names, list | tuple):
        parsed: dict[int, object] = dict(enumerate(names))
    elif isinstance(names, Mapping):
        parsed = _names_by_id(names, source)
    else:
        raise DataConfigError(f"{source}: 'names' must be a list or an id -> name mapping, got "
                              f"{names!r}; e.g. `{_KEY_EXAMPLES['names']}`")
    if not parsed:
        raise DataConfigError(f"{source}: 'names' is empty; list at least one class, "
                              f"e.g. `{_KEY_EXAMPLES['names']}`")
    for cid, name in parsed.items():
        if name is None or str(name).strip() == "":
            raise DataConfigError(f"{source}: class {cid} in 'names' has no name; give it one")
    if count is not None and count != len(parsed):
        raise DataConfigError(f"{source}: nc={count} but 'names' lists {len(parsed)} classes; make them "
                              f"agree (or drop nc: it is implied by names)")
    return {cid: str(parsed[cid]) for cid in sorted(parsed)}


def _names_by_id(names: Mapping[object, object], source: str) -> dict[int, object]:
    """An id -> name mapping whose ids (ints or digit strings) are exactly ``0 .. n-1``."""
    parsed: dict[int, object] = {}
    for key, name in names.items():
        cid = _class_id(key, source)
        if cid in parsed:
            raise DataConfigError(f"{source}: 'names' lists class id {cid} twice")
        parsed[cid] = name
    wanted = set(range(len(parsed)))
    if set(parsed) != wanted:
        missing = sorted(wanted - set(parsed))
        raise DataConfigError(
            f"{source}: 'names' ids must be 0..{len(parsed) - 1} without gaps; got "
            f"{sorted(parsed)}" + (f" (missing {missing})" if missing else "")
            + "; renumber them from 0, e.g. `names: {0: cat, 1: dog}`")
    return parsed


def _parse_nc(nc: object, source: str) -> int:
    if isinstance(nc, bool) or not (isinstance(nc, int) or (isinstance(nc, str) and nc.strip().isdigit())):
        raise DataConfigError(f"{source}: nc={nc!r} is not a whole number; set it to the class count")
    value = int(nc)
    if value < 1:
        raise DataConfigError(f"{source}: nc={value}; a dataset needs at least one class")
    return value


def _class_id(key: object, source: str) -> int:
    if isinstance(key, int) and not isinstance(key, bool):
        return key
    if isinstance(key, str) and key.strip().isdigit():
        return int(key)
    raise DataConfigError(f"{source}: 'names' key {key!r} is not a class id; use 0, 1, 2, ...")


def _coco_jsons(splits: Mapping[str, SplitValue]) -> list[Path]:
    """The COCO JSON split files, val first (usually the smallest file to read categories from)."""
    return [p for s in ("val", "train", "test") for p in _as_tuple(splits[s]) if p.suffix.lower() == ".json"]


def _as_tuple(value: SplitValue) -> tuple[Path, ...]:
    return () if value is None else value if isinstance(value, tuple) else (value,)


def _resolve_coco_images(value: object, root: Path, source: str) -> dict[str, Path]:
    if value is None or value == "":
        return {}
    if isinstance(value, str | os.PathLike):
        return {s: _resolve_entry(value, root) for s in SPLITS}
    if isinstance(value, Mapping) and all(k in SPLITS and isinstance(v, str | os.PathLike)
                                          for k, v in value.items()):
        return {str(k): _resolve_entry(v, root) for k, v in value.items()}
    raise DataConfigError(f"{source}: 'coco_images' must be a folder or a mapping of split -> folder "
                          f"(keys {', '.join(SPLITS)}), got {value!r}; e.g. `coco_images: "
                          "{train: train2017, val: val2017}`")
