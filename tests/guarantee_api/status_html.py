"""Reading the status page as a person reads it (tests): each table's rows as the text of
their cells, the page's text, and its refresh; parsed with html.parser, so an escaped
value reads back as the text it was and markup smuggled into a value would show up as
extra cells or elements."""

from __future__ import annotations

from html.parser import HTMLParser


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: dict[str, list[list[str]]] = {}
        self.row_classes: dict[str, list[str]] = {}
        self.refresh: list[str] = []
        self.tags: list[str] = []
        self.text: list[str] = []
        self._table: str | None = None
        self._cell: list[str] | None = None
        self._in_body = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append(tag)
        if tag == "meta" and (a.get("http-equiv") or "").lower() == "refresh":
            self.refresh.append(a.get("content") or "")
        elif tag == "table":
            self._table = a.get("id") or ""
            self.tables[self._table] = []
            self.row_classes[self._table] = []
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
            self.row_classes[self._table].append(a.get("class") or "")
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []
        elif tag == "body":
            self._in_body = True

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._table is not None:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        if self._in_body:
            self.text.append(data)


def read_page(html: str) -> _Page:
    """The page parsed: `tables[id]` (rows, header first), `row_classes[id]`, `refresh`
    (each refresh meta's content), `tags` (every element opened) and `text`."""
    page = _Page()
    page.feed(html)
    page.close()
    return page


def rows(html: str, table: str) -> list[list[str]]:
    """The body rows of the table with id `table`, as cell texts (the header row left out)."""
    return read_page(html).tables[table][1:]


def page_text(html: str) -> str:
    """The body's text, whitespace collapsed."""
    return " ".join("".join(read_page(html).text).split())
