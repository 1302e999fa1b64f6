"""Read a classification dataset description: an ImageFolder root, a YAML file, a dict, or ``shapes-cls``.

The layout is the one torchvision's ``ImageFolder`` and Ultralytics' classify use::

    mydata/
      train/<class name>/*.jpg      one folder per class (nested folders inside it count too)
      val/<class name>/*.jpg        optional; a class may be missing here
      test/<class name>/*.jpg       optional

Given as the folder itself (``data="mydata"``; class ids follow the sorted ``train`` folder
names) or as a YAML file with ``path``/``train``/``val``/``test``/``names`` (``names`` fixes the
class ids; each is a folder name of the splits; without it the sorted ``train`` folders are used).
``data="shapes-cls"`` is the bundled set (``shapes_cls.ensure_shapes_cls``).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from ...data.errors import DataConfigError

SPLITS = ("train", "val", "test")
BUNDLED_NAMES = ("shapes-cls", "shapes-cls.yaml")
_KEYS = ("path", *SPLITS, "names", "nc")
_LAYOUT = "<root>/train/<class>/*.jpg (and <root>/val/<class>/*.jpg)"
_EXAMPLE = "path: datasets/mydata\ntrain: train\nval: val\nnames: [cat, dog]"


@dataclass(frozen=True)
class FolderData:
    """A parsed ImageFolder dataset with every path resolved.

    Attributes:
        root: the dataset root (absolute).
        train, val, test: the split folders; None when absent (``val``/``test`` only).
        names: class id -> class name, which is also the class's folder name in each split.
        source: where it came from (a folder, a YAML path, ``"data dict"``), for messages.
    """

    root: Path
    train: Path
    val: Path | None
    test: Path | None
    names: dict[int, str]
    source: str

    @property
    def nc(self) -> int:
        return len(self.names)


def load_folder_data(data: str | os.PathLike[str] | Mapping[str, object] | FolderData) -> FolderData:
    """Parse a classification dataset description (see the module docstring).

    Raises:
        DataConfigError: no such file or folder, a folder without ``train/``, invalid YAML, a
            bad key or value, or no class folders to take names from; each names the fix.
    """
    if isinstance(data, FolderData):
        return data
    if isinstance(data, Mapping):
        return _from_mapping(data, Path.cwd(), "data dict")
    if not isinstance(data, str | os.PathLike):
        raise DataConfigError(f"data={data!r} ({type(data).__name__}) is not a dataset; pass an ImageFolder "
                              "root, a data.yaml path, a dict, or 'shapes-cls'")
    path = Path(data).expanduser()
    if not path.exists() and os.fspath(data) in BUNDLED_NAMES:
        from .shapes_cls import ensure_shapes_cls  # lazy: generating is only needed when asked for

        path = ensure_shapes_cls()
    if path.is_dir():
        if (path / "train").is_dir():
            return _from_mapping({}, path, os.fspath(path))
        if (path / "data.yaml").is_file():
            path = path / "data.yaml"
        else:
            raise DataConfigError(f"data={os.fspath(data)!r} is a folder without a 'train' folder or a data.yaml; "
                                  f"a classification dataset is laid out as {_LAYOUT}")
    if not path.is_file():
        hint = difflib.get_close_matches(os.fspath(data), BUNDLED_NAMES, n=1)
        raise DataConfigError(f"data={os.fspath(data)!r}: no such file or folder"
                              + (f"; did you mean the bundled dataset {hint[0]!r}?" if hint else
                                 f"; pass an ImageFolder root ({_LAYOUT}), a data.yaml, or 'shapes-cls'"))
    path = Path(os.path.abspath(path))
    return _from_mapping(_read_yaml(path), path.parent, os.fspath(path))


def _read_yaml(path: Path) -> Mapping[str, object]:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise DataConfigError(f"{path}: cannot read ({err.strerror or err})") from err
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise DataConfigError(f"{path}: not valid YAML ({err}); e.g.\n{_EXAMPLE}") from err
    if not isinstance(raw, Mapping):
        raise DataConfigError(f"{path}: expected key: value pairs such as\n{_EXAMPLE}")
    return raw


def _from_mapping(raw: Mapping[str, object], base: Path, source: str) -> FolderData:
    raw = {str(k): v for k, v in raw.items()}
    for key in raw:
        if key not in _KEYS:
            hint = difflib.get_close_matches(key, _KEYS, n=1)
            raise DataConfigError(f"{source}: unknown key {key!r}" + (f" (did you mean {hint[0]!r}?)" if hint else "")
                                  + f"; a classification data.yaml has {', '.join(_KEYS)}")
    root_value = raw.get("path")
    root = Path(os.path.abspath(base / Path(str(root_value)).expanduser())) if root_value else Path(
        os.path.abspath(base))
    splits = {s: _split_folder(raw.get(s), s, root, source) for s in SPLITS}
    train = splits["train"]
    if train is None or not train.is_dir():
        raise DataConfigError(f"{source}: the training split {train or root / 'train'} is not a folder; "
                              f"a classification dataset is laid out as {_LAYOUT}")
    names = _parse_names(raw.get("names"), train, source)
    if raw.get("nc") is not None and int(str(raw["nc"])) != len(names):
        raise DataConfigError(f"{source}: nc={raw['nc']} but there are {len(names)} classes ({', '.join(names.values())}); "
                              "make them agree or drop nc")
    return FolderData(root, train, splits["val"], splits["test"], names, source)


def _split_folder(value: object, split: str, root: Path, source: str) -> Path | None:
    """The split's folder: as written, else ``<root>/<split>`` when that exists."""
    if value is None or value == "":
        default = root / split
        return default if split == "train" or default.is_dir() else None
    if not isinstance(value, str | os.PathLike):
        raise DataConfigError(f"{source}: {split!r} must be one folder (of class folders), got {value!r}")
    return Path(os.path.abspath(root / Path(value).expanduser()))


def _parse_names(value: object, train: Path, source: str) -> dict[int, str]:
    if value is None:
        folders = sorted(p.name for p in train.iterdir() if p.is_dir() and not p.name.startswith("."))
        if not folders:
            raise DataConfigError(f"{source}: {train} has no class folders; put each class's images in "
                                  f"{train}/<class name>/")
        return dict(enumerate(folders))
    if isinstance(value, Mapping):
        try:
            table = {int(str(k)): str(v) for k, v in value.items()}
        except ValueError:
            raise DataConfigError(f"{source}: 'names' keys must be class ids 0, 1, ...; got {list(value)}") from None
        if sorted(table) != list(range(len(table))):
            raise DataConfigError(f"{source}: 'names' ids must be 0..{len(table) - 1} without gaps; got {sorted(table)}")
    elif isinstance(value, list | tuple):
        table = {i: str(v) for i, v in enumerate(value)}
    else:
        raise DataConfigError(f"{source}: 'names' must be a list of class folder names, got {value!r}")
    if not table:
        raise DataConfigError(f"{source}: 'names' is empty; list the class folder names")
    seen: dict[str, int] = {}
    for cid, name in table.items():
        if not name.strip() or "/" in name or name in (".", ".."):
            raise DataConfigError(f"{source}: class {cid} has name {name!r}, which is not a folder name")
        if name in seen:
            raise DataConfigError(f"{source}: 'names' lists {name!r} twice (ids {seen[name]} and {cid})")
        seen[name] = cid
    return dict(sorted(table.items()))
