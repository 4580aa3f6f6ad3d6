"""YAML as people write it by hand: a key given twice in one mapping is refused, where PyYAML would let the last
one win silently (`name: a` then `name: b` submitted `b`; a quota given twice took the second)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml


class _UniqueKeys(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that repeats a key."""


def _mapping(loader: _UniqueKeys, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`: its keys may be given again, on purpose
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            repeated = key in seen
        except TypeError:  # an unhashable key: the safe loader refuses it itself
            break
        if repeated:
            raise yaml.constructor.ConstructorError("while reading a mapping", node.start_mark,
                                                    f"the key {key!r} appears twice", key_node.start_mark)
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_UniqueKeys.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def load(text: str) -> Any:
    """The one document of `text`."""
    return yaml.load(text, Loader=_UniqueKeys)  # noqa: S506 - a safe loader


def load_all(text: str) -> Iterator[Any]:
    """Each document of `text` (separated by `---`)."""
    return yaml.load_all(text, Loader=_UniqueKeys)  # noqa: S506 - a safe loader
