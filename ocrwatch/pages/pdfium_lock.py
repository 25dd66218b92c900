"""One lock around every stretch of PDFium work in the process.

PDFium is not thread-safe, not even across documents: pypdfium2's documentation says no
two threads may call it at the same time, whatever the document, or the process may
crash or be corrupted. The daemon opens PDFs on several preparer threads and writes PDF
outputs on its reader threads, so each stretch of PDFium work (opening a document,
drawing or reading one page, closing) holds this lock; everything around it (scaling
the drawn page, decoding images, reading with the engine) runs in parallel.

Reentrant, because the stretches nest (a page's text layer is judged while the page is
held). Never held across a ``yield``: a generator's consumer may wait for other threads.
"""

from __future__ import annotations

import threading

PDFIUM = threading.RLock()
