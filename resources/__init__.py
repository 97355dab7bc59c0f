"""Icons, the style sheet, the desktop entry and screenshots (data only)."""

from pathlib import Path

RESOURCES = Path(__file__).resolve().parent


def path(name: str) -> Path:
    return RESOURCES / name


def readme_url() -> str | None:
    """The README beside a source checkout (editable installs); None in an installed wheel, which has none."""
    readme = RESOURCES.parent / "README.md"
    return readme.as_uri() if readme.is_file() else None
