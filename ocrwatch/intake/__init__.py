"""Intake: noticing files in the watched folders and saying when one is finished. ``watch``
turns watchdog's events into the settler's, ``settle`` decides when a file is finished or
gone, ``inbox_files`` says which files are candidates, and ``follow`` applies moves, renames
and deletions to the index, the sidecars and the thumbnails.
"""
