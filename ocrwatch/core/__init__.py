"""The core every layer may use, which imports no other part of ocrwatch: the shared types
(``domain``, ``layout``, ``status``), what happens to a file as events (``events``), the
exception tree (``errors``), the daemon's threads (``threads``), text helpers
(``textutil``), the sidecars' names (``naming``), keeping file names out of a hook's code
(``hookshell``), the status's progress figures (``progress``) and the version
(``version``). Handling the file system safely is ``ocrwatch.fs``, one layer up.
"""
