"""The outputs a file may get, as records: name (as ``outputs`` in the config spells
it), file suffix, how it is rendered from the pages read, and how a written file is
verified before the original may be archived or deleted.

Adding a format is its name and suffix in :data:`ocrwatch.core.naming.SUFFIXES` and one
record here (with its renderer): the sidecar writer, ``reread --outputs``, the check
before retiring an original, the job's recorded outputs (``job_outputs``) and, through
them, the moves that follow a file, archiving, deleting, ``reindex --from-sidecars`` and
the hooks loop over the names. The searchable PDF is made from the original's pages as
well as the text (:class:`ocrwatch.results.outputs.PdfMaker`), so it has no ``render`` here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ocrwatch.core.domain import PageText
from ocrwatch.core.naming import SUFFIXES, output_path, output_paths
from ocrwatch.results import alto, hocr
from ocrwatch.results.textout import render_markdown, render_text

Render = Callable[[list[PageText], str], str]  # (pages, the original's name) -> content
Verify = Callable[[Path, list[PageText]], str | None]  # a problem, or None


@dataclass(frozen=True)
class Output:
    name: str  # as core/naming.SUFFIXES has it
    render: Render | None  # None: made from the original's pages (the PDF)
    verify: Verify
    boxes: bool = False  # needs each word's box (the page's layout)

    @property
    def suffix(self) -> str:
        return SUFFIXES[self.name]

    def path(self, stem: Path) -> Path:
        return output_path(stem, self.name)


OUTPUTS: dict[str, Output] = {}


def register(output: Output) -> Output:
    OUTPUTS[output.name] = output
    return output


def _same_text(render: Callable[[list[PageText]], str]) -> Verify:
    def verify(path: Path, pages: list[PageText]) -> str | None:
        if path.is_symlink() or path.read_text(encoding="utf-8") != render(pages):
            return f"{path.name} does not hold what was written to it"
        return None
    return verify


def _pdf_pages(path: Path, pages: list[PageText]) -> str | None:
    import pikepdf

    with pikepdf.open(path) as pdf:
        got = len(pdf.pages)
    if got != len(pages):
        return f"the searchable PDF {path.name} has {got} pages, not {len(pages)}"
    return None


def _xml_pages(tag: str) -> Verify:
    """A file that parses as XML and has one ``tag`` element for each page."""
    def verify(path: Path, pages: list[PageText]) -> str | None:
        import xml.etree.ElementTree as ET  # only when an original is about to go

        if path.is_symlink():
            return f"{path.name} is a link, not the file written"
        root = ET.parse(path).getroot()
        if tag == "ocr_page":
            got = sum(1 for e in root.iter() if e.get("class") == "ocr_page")
        else:
            got = sum(1 for e in root.iter() if e.tag.rsplit("}", 1)[-1] == tag)
        if got != len(pages):
            return f"{path.name} has {got} pages, not {len(pages)}"
        return None
    return verify


register(Output("md", lambda pages, _name: render_markdown(pages),
                _same_text(render_markdown)))
register(Output("txt", lambda pages, _name: render_text(pages),
                _same_text(render_text)))
register(Output("pdf", None, _pdf_pages, boxes=True))
register(Output("hocr", hocr.render, _xml_pages("ocr_page"), boxes=True))
register(Output("alto", alto.render, _xml_pages("Page"), boxes=True))


def needs_boxes(outputs: Iterable[str]) -> bool:
    """Whether any of ``outputs`` puts words on their boxes."""
    return any(OUTPUTS[o].boxes for o in outputs if o in OUTPUTS)


def paths(stem: Path, outputs: Iterable[str]) -> dict[str, Path]:
    """Where each of ``outputs`` goes for ``stem``."""
    return output_paths(stem, (o for o in outputs if o in OUTPUTS))


# Which output stands for a file whose original was deleted after its reading (its index
# entry is named by it): the searchable PDF holds the pages themselves, then the text.
STANDS_FOR = ("pdf", "md", "txt")
# Which output to open to read a file (the tray's last result): the text first.
READ_FIRST = ("md", "txt", "pdf")


def main_output(outputs: Mapping[str, Path | None],
                order: tuple[str, ...] = STANDS_FOR) -> Path | None:
    """The output that stands for the file: the first of ``order`` that ``outputs`` has,
    else the first other one it has (in :data:`OUTPUTS`' order), else None."""
    ranked = [*order, *(o for o in OUTPUTS if o not in order), *outputs]
    return next((p for o in ranked if (p := outputs.get(o)) is not None), None)


def plain(name: str) -> bool:
    """Whether the output ``name`` is rendered from the pages' text alone (.md, .txt), so
    that what ocrwatch wrote can be told from the stored text."""
    output = OUTPUTS.get(name)
    return output is not None and output.render is not None and not output.boxes


def rendered(stem: Path, pages: list[PageText], outputs: Iterable[str],
             name: str) -> list[tuple[Path, str]]:
    """The files of ``outputs`` rendered from the pages (all but the PDF), with their
    paths; ``name``: the original's file name, which hOCR and ALTO name as their source."""
    out = []
    for o in outputs:
        output = OUTPUTS.get(o)
        if output is not None and output.render is not None:
            out.append((output.path(stem), output.render(pages, name)))
    return out
