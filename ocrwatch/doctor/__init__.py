"""``ocrwatch doctor``: ``checks`` runs the checks and writes the report, ``gpu`` checks the
card, vLLM and the model, ``desktop`` the tray, opening files and notifications, and
``check`` is one finding.
"""
