"""Small HTML pieces for the report's sections: a section, a table, numbers and percentages."""
from __future__ import annotations

from html import escape
from typing import Sequence


def section(section_id: str, heading: str, inner: str) -> str:
    return f'<section id="{section_id}"><h2>{escape(heading)}</h2>{inner}</section>'


def table(headers: Sequence[tuple[str, bool]], rows: Sequence[Sequence[str]]) -> str:
    """`headers` are (title, numeric); numeric columns are right-aligned. Cells are HTML already."""

    def cell(tag: str, content: str, numeric: bool) -> str:
        return f'<{tag} class="num">{content}</{tag}>' if numeric else f"<{tag}>{content}</{tag}>"

    head = "".join(cell("th", escape(h), num) for h, num in headers)
    body = "".join(
        "<tr>" + "".join(cell("td", value, num) for value, (_, num) in zip(row, headers)) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def pct(value: float | None) -> str:
    return "&ndash;" if value is None else f"{value * 100:.1f}%"


def num(value: float | None, digits: int = 3) -> str:
    return "&ndash;" if value is None else f"{value:.{digits}f}"
