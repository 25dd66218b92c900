"""The file system, handled safely: where ocrwatch's own files live (``paths``), modes that
keep them private (``private``), opening a file beneath a folder without following links
(``safeopen``) and moving without ever replacing (``fsmove``). It uses only the core's
exception tree, and everything above it may use it.
"""
