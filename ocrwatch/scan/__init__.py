"""Pages as scanners deliver them, put right before any engine reads them: ``prepare`` runs the
steps in order, ``orient`` finds a page turned by 90, 180 or 270 degrees (Tesseract's
orientation detection), ``deskew`` straightens small angles and ``inkcover`` measures the
ink that tells a blank back from a page.
"""
