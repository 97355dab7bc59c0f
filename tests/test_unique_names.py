"""One class per name across core/ and gui/: a name that means two things (two `Placement`s, two `Hub`s) makes
every reader check which one an import brings in."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import tf_device_panel

PACKAGE = Path(tf_device_panel.__file__).resolve().parent.parent
# Pairs still sharing a name, each meaning the same thing on its side of a boundary (a result's series and the
# sampler's; the protocol's device records and the map's drawing of them): not to grow.
SHARED = {"Series", "LogicalDevice", "PhysicalDevice", "Progress", "Segment"}


def class_definitions() -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for folder in ("core", "gui"):
        for path in sorted((PACKAGE / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef):
                    found[node.name].append(str(path.relative_to(PACKAGE)))
    return found


def test_placement_and_the_hub_are_each_defined_once() -> None:
    found = class_definitions()
    assert found["Placement"] == ["core/protocol/events.py"]
    assert found["Hub"] == ["core/hub.py"]


def test_no_new_class_shares_a_name() -> None:
    shared = {name: paths for name, paths in class_definitions().items() if len(paths) > 1}
    assert set(shared) <= SHARED, {name: shared[name] for name in set(shared) - SHARED}
