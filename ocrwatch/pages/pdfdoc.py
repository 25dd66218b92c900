"""What a PDF holds beside its pages, which a viewer shows and its pages do not.

- A dynamic XFA form (``/NeedsRendering true``, or an ``/XFA`` form with no fields of
  its own): a viewer that knows XFA builds the form from the XFA data; the pages
  themselves hold only a "Please wait..." notice. The pages are read as they are, the
  XFA data's text is added to the first page's text (so that it can be searched), and
  the original is kept: no reading of the form as a viewer shows it is whole.
- Attached files (``/EmbeddedFiles``, a portfolio's ``/Collection``): their contents are
  not read; the original is kept, naming them.

Read with qpdf (pikepdf), apart from PDFium, once per file.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

log = logging.getLogger(__name__)

MAX_XFA_BYTES = 16 << 20  # an XFA packet larger than this is not read for its text
MAX_XFA_CHARS = 200_000  # text taken from the XFA data at most
MAX_NAMED = 5  # attached files named in the reason; more are counted
MAX_ANNOTS = 100_000  # annotations looked at for attached files, in all pages


@dataclass(frozen=True)
class Extras:
    """Why the original is kept (None: nothing beside the pages), and text to index."""

    doubt: str | None = None
    text: str = ""


def extras(path: Path, fh: BinaryIO | None = None) -> Extras:
    """What the PDF at ``path`` (or open as ``fh``) holds beside its pages."""
    import pikepdf

    try:
        if fh is not None:
            fh.seek(0)
        with pikepdf.open(fh if fh is not None else path) as pdf:
            return _extras(pdf)
    except Exception as exc:  # damaged: PDFium's reading of its pages says what is wrong
        log.debug("%s: what it holds beside its pages cannot be read (%s)", path.name, exc)
        return Extras()


def _extras(pdf: Any) -> Extras:
    doubts: list[str] = []
    text = ""
    root = pdf.Root
    form = root.get("/AcroForm")
    xfa = form.get("/XFA") if form is not None else None
    fields = form.get("/Fields") if form is not None else None
    if root.get("/NeedsRendering") is True or (xfa is not None and not fields):
        doubts.append("it is a dynamic XFA form: its pages hold only what a viewer without "
                      "XFA shows, not the form; open it in Adobe Reader and print it to a PDF "
                      "into the inbox")
        text = _xfa_text(xfa) if xfa is not None else ""
    names = _attached(pdf)
    if names or root.get("/Collection") is not None:
        shown = ", ".join(names[:MAX_NAMED]) + (
            f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else "")
        kind = "a PDF portfolio" if root.get("/Collection") is not None else "the PDF"
        doubts.append(f"{kind} holds attached files that were not read"
                      + (f" ({shown})" if shown else "")
                      + "; save them from a viewer into the inbox to have them read")
    return Extras("; ".join(doubts) or None, text)


def _attached(pdf: Any) -> list[str]:
    """The names of the files attached to the document and to its pages' notes."""
    import pikepdf

    try:
        names = [str(name) for name in pdf.attachments]
    except Exception as exc:  # a damaged name tree: still attached files
        log.debug("the attached files cannot be listed (%s)", exc)
        tree = pdf.Root.get("/Names")
        names = ["?"] if tree is not None and tree.get("/EmbeddedFiles") is not None else []
    seen = 0
    try:
        for number, page in enumerate(pdf.pages, 1):
            for annot in page.obj.get("/Annots", ()):
                seen += 1
                if seen > MAX_ANNOTS:
                    return names
                if (isinstance(annot, pikepdf.Dictionary)
                        and annot.get("/Subtype") == pikepdf.Name.FileAttachment):
                    spec = annot.get("/FS")
                    name = (spec.get("/UF") or spec.get("/F")
                            if isinstance(spec, pikepdf.Dictionary) else None)
                    names.append(f"{name if name is not None else '?'} on page {number}")
    except Exception as exc:  # damaged pages: PDFium says what is wrong with them
        log.debug("the pages' attached files cannot be listed (%s)", exc)
    return names


def _xfa_text(xfa: Any) -> str:
    """The text of the XFA form's data (its ``datasets`` packet): the values filled in."""
    import xml.etree.ElementTree as ET

    import pikepdf

    packets: list[Any] = []
    if isinstance(xfa, pikepdf.Array):
        items = list(xfa)
        packets = [s for name, s in zip(items[::2], items[1::2], strict=False)
                   if str(name) == "datasets"]
    elif isinstance(xfa, pikepdf.Stream):
        packets = [xfa]
    words: list[str] = []
    for packet in packets:
        try:
            data = _bounded(packet, pikepdf)
            if data is None:
                continue
            # No entities expanded: ElementTree leaves external ones alone, and a
            # document-type declaration (where expansion bombs live) is refused.
            if b"<!DOCTYPE" in data.upper():
                continue
            tree = ET.fromstring(data)
        except Exception as exc:
            log.debug("the XFA data cannot be read (%s)", exc)
            continue
        for element in tree.iter():
            if element.text and element.text.strip():
                words.append(" ".join(element.text.split()))
    return "\n".join(words)[:MAX_XFA_CHARS]


def _bounded(stream: Any, pikepdf: Any) -> bytes | None:
    """A stream's decoded bytes, or None past MAX_XFA_BYTES (a deflate bomb is never
    decoded whole) or under a filter other than deflate."""
    from ocrwatch.pages.pdftext import stream_pieces

    if stream.get("/Filter") not in (None, pikepdf.Name.FlateDecode):
        return None
    data = bytearray()
    for piece in stream_pieces(stream, pikepdf):
        data += piece
        if len(data) > MAX_XFA_BYTES:
            return None
    return bytes(data)
