"""The store: the SQLite file, its schema, the durable job queue and the full-text index.
``db`` is the connection, its lock and transactions, ``migrations`` the schema one named
step at a time, ``jobs`` (with ``jobfiles``) the queue's rows and their states, ``index``
the page rows and searches. The SQL belongs here; ``results.lifecycle``, ``intake.follow``,
``reindex`` and ``web.server`` still run some of their own. Of the layers, only ``config``
and ``core`` are below it.
"""
