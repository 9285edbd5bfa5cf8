"""What a data file is when it is no UTF-8 CSV text: a spreadsheet or another binary
format by its first bytes, text in a legacy Western encoding; for messages naming the fix."""

from __future__ import annotations

#: The first bytes of files that are no CSV text: what each is, as a person names it.
_MAGIC = ((b"PK\x03\x04", "a ZIP file (an Excel .xlsx or OpenDocument spreadsheet?)"),
          (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "an old Excel .xls spreadsheet"),
          (b"PAR1", "a Parquet file (name it .parquet)"),
          (b"\x1f\x8b", "gzip-compressed (name it .csv.gz)"),
          (b"%PDF", "a PDF document"))


def spreadsheet_kind(first: bytes) -> str:
    """What a file whose first bytes are ``first`` is when it is no CSV text; "" else."""
    for magic, kind in _MAGIC:
        if first.startswith(magic):
            return kind
    return ""


def legacy_encoding_hint(raw: bytes) -> str:
    """", it reads as Windows-1252 (Latin-1): 'Zürich'" when ``raw`` decodes in that legacy
    Western encoding with a letter beyond ASCII; "" otherwise."""
    try:
        text = raw.decode("cp1252")
    except UnicodeDecodeError:
        return ""
    words = [w for w in text.replace(",", " ").split() if any(ord(c) > 127 for c in w)]
    if not words:
        return ""
    return f"; it reads as Windows-1252 (Latin-1): {words[0].strip()[:40]!r}"

