"""The README's settings table, made from core.config.table: `python -m core.config.docs
README.md` rewrites the table between the README's markers (a test fails when they differ)."""

from __future__ import annotations

import sys
from pathlib import Path

from core.config.table import TABLE, Setting

BEGIN = "<!-- settings table: made by `python -m core.config.docs README.md` -->"
END = "<!-- end of settings table -->"
NONE = "—"


def settings_table() -> str:
    """One markdown row per setting: flag, env variable, config.json field, type, default,
    meaning."""
    lines = ["| flag | env | config.json | type | default | meaning |", "|---|---|---|---|---|---|"]
    lines += [f"| {' | '.join(_cells(setting))} |" for setting in TABLE]
    return "\n".join(lines)


def _cells(setting: Setting) -> tuple[str, ...]:
    return (
        _code(setting.flag),
        _code(setting.env),
        _code(setting.field),
        setting.kind.name,
        shown_default(setting),
        setting.doc.replace("|", "\\|"),
    )


def _code(text: str) -> str:
    return f"`{text}`" if text else NONE


def shown_default(setting: Setting) -> str:
    """The default as the README and `--help` state it ("—" for none)."""
    value = setting.default
    if setting.shown:
        return setting.shown
    if value is None or value == "" or value == () or value == []:
        return NONE
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def with_table(readme: str) -> str:
    """`readme` with the text between the markers replaced by the current table."""
    head, begin, rest = readme.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"the README has no {BEGIN} ... {END} markers")
    return f"{head}{BEGIN}\n{settings_table()}\n{END}{tail}"


if __name__ == "__main__":
    readme = Path(sys.argv[1])
    readme.write_text(with_table(readme.read_text()))
