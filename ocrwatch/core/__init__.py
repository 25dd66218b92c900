"""The core every layer may use, which imports no other part of ocrwatch: the shared types
(``domain``, ``layout``, ``status``), the exception tree (``errors``), the daemon's threads
(``threads``), text helpers (``textutil``), the sidecars' names (``naming``), quoting for
a shell's command string (``hookshell``), the status's progress figures (``progress``) and
the version (``version``). Handling the file system safely is ``ocrwatch.fs``, one layer up.
"""
