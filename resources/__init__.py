"""Icons, the style sheet, the desktop entry and screenshots (data only)."""

from pathlib import Path

RESOURCES = Path(__file__).resolve().parent


def path(name: str) -> Path:
    return RESOURCES / name
