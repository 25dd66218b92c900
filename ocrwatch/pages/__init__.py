"""Pages: a file made into pages. ``decode`` sniffs a file's type, checks its limits and
decodes images; ``image`` holds what images and PDF pages share (limits, scaling, blank
pages); ``pdfpages`` opens PDFs with PDFium and ``pdftext`` takes their own text
layers; ``pdfium_lock`` is the one lock around PDFium; ``thumbs`` keeps the search page's
thumbnails and ``memory`` gives freed memory back after a big page.
"""
