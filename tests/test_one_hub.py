"""Issue 39: one way to subscribe in core/ and gui/ (core/hub.py, and the controller's hop onto the GUI thread over
it), and one session, the window's (read from the source)."""

from __future__ import annotations

import ast
from pathlib import Path

import tf_device_panel

PACKAGE = Path(tf_device_panel.__file__).resolve().parent.parent
CONTROLLER = "gui/shell/controller.py"


def sources() -> dict[str, ast.Module]:
    return {str(path.relative_to(PACKAGE)): ast.parse(path.read_text(encoding="utf-8"))
            for folder in ("core", "gui") for path in sorted((PACKAGE / folder).rglob("*.py"))}


def test_the_hub_and_the_controllers_hop_are_the_only_ways_to_subscribe() -> None:
    subscribing = sorted(f"{path}: {node.name}" for path, tree in sources().items()
                         for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
                         for item in node.body
                         if isinstance(item, ast.FunctionDef) and item.name in ("subscribe", "subscribe_all", "on"))
    assert subscribing == ["core/hub.py: Hub", f"{CONTROLLER}: RuntimeController"]
    names = {node.id if isinstance(node, ast.Name) else node.attr for tree in sources().values()
             for node in ast.walk(tree) if isinstance(node, ast.Name | ast.Attribute)}
    assert not names & {"Listeners", "ManagerCallbacks", "listeners", "_watchers", "_listeners"}


def test_the_controller_has_no_signal_but_its_hop_and_the_pumps() -> None:
    tree = sources()[CONTROLLER]
    signals = [target.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
               and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
               and node.value.func.id == "Signal" for target in node.targets if isinstance(target, ast.Name)]
    assert signals == ["eventsArrived", "_hop"]


def test_no_panel_connects_to_the_controllers_signals() -> None:
    """Panels and the window hear the session through `subscribe`; `eventsArrived` is the controller's own."""
    connected = []
    for path, tree in sources().items():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and node.attr == "connect"
                    and isinstance(node.value, ast.Attribute)):
                continue
            owner = node.value.value
            owner_name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(
                owner, ast.Attribute) else ""
            if owner_name in ("link", "controller") or (owner_name == "self" and path == CONTROLLER
                                                        and node.value.attr != "eventsArrived"
                                                        and node.value.attr != "_hop"):
                connected.append(f"{path}:{node.lineno} {owner_name}.{node.value.attr}.connect")
    assert connected == []


def test_the_window_has_one_session_and_no_panel_builds_its_own() -> None:
    """The window's session is its run manager's (core.client.run_manager makes it when none is given); gui/
    constructs none."""
    built = [f"{path}:{node.lineno}" for path, tree in sources().items() if path.startswith("gui/")
             for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
             and node.func.id == "Session"]
    assert built == []
