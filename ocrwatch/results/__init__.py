"""Results: what is written for a finished file, and what becomes of its original. ``sidecar``
writes the .md/.txt pair, ``outputs`` (with ``pdfout`` and ``align``) the searchable PDF,
``retire`` says whether an original may go (every page read, every output verified),
``lifecycle`` keeps, archives or deletes it, and ``failed`` moves failed ones aside.
"""
