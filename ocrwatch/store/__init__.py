"""The store: the SQLite file, its schema, the durable job queue and the full-text index.
``db`` is the connection, its lock and transactions, ``migrations`` the schema one named
step at a time, ``jobs`` (with ``jobfiles``) the queue's rows and their states, ``index``
the page rows, the full-text tables and searches. All SQL is here, and each table has one
module that writes it (``tests/test_table_owners.py``). Of the layers, only ``config``
and ``core`` are below it.
"""
