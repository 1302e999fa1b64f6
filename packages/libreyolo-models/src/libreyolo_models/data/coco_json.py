"""Reading a COCO annotation file and its categories (shared by the dataset config and the reader)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from .errors import DataConfigError, EmptySplitError

_EXAMPLE = ('{"images": [{"id": 1, "file_name": "a.jpg", "width": 640, "height": 480}], '
            '"annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [10, 20, 100, 80]}], '
            '"categories": [{"id": 1, "name": "cat"}]}')


def read_coco_categories(json_path: Path) -> list[tuple[int, str]]:
    """The JSON's categories as ``(id, name)`` sorted by id: class ``i`` is the i-th entry.

    Raises:
        DataConfigError: unreadable file, invalid JSON, or missing/malformed ``categories``.
    """
    return categories(load_coco_json(json_path), json_path)


def load_coco_json(json_path: Path) -> Mapping[str, object]:
    try:
        with json_path.open("rb") as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise EmptySplitError(f"COCO annotations {json_path} do not exist; fix the split's path") from None
    except OSError as err:
        raise DataConfigError(f"cannot read COCO annotations {json_path} ({err.strerror or err})") from err
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataConfigError(f"{json_path} is not valid JSON ({err}); a COCO file looks like "
                              f"{_EXAMPLE}") from err
    if not isinstance(doc, Mapping):
        raise DataConfigError(f"{json_path}: expected a JSON object, e.g. {_EXAMPLE}")
    for key in ("images", "annotations", "categories"):
        if not isinstance(doc.get(key), list):
            raise DataConfigError(f"{json_path}: missing list {key!r}; a COCO file looks like {_EXAMPLE}")
    return doc


def categories(doc: Mapping[str, object], json_path: Path) -> list[tuple[int, str]]:
    cats: dict[int, str] = {}
    entries: list[object] = doc["categories"]  # type: ignore[assignment]  # checked by load_coco_json
    for i, cat in enumerate(entries):
        cid = cat.get("id") if isinstance(cat, Mapping) else None
        name = cat.get("name") if isinstance(cat, Mapping) else None
        if not isinstance(cid, int) or isinstance(cid, bool) or not isinstance(name, str) or not name:
            raise DataConfigError(f"{json_path}: categories[{i}] = {cat!r}; each category needs an "
                                  'integer "id" and a "name", e.g. {"id": 1, "name": "cat"}')
        if cid in cats:
            raise DataConfigError(f"{json_path}: category id {cid} appears twice; ids must be unique")
        cats[cid] = name
    if not cats:
        raise DataConfigError(f"{json_path}: 'categories' is empty; list the classes, e.g. "
                              '[{"id": 1, "name": "cat"}]')
    return sorted(cats.items())
