"""The search page: ``server`` is the HTTP server on 127.0.0.1 and its answers, ``handler`` one
request (token, Host check, routes, static files), ``params`` its parameters read strictly,
and ``opener`` opens a hit with the desktop's programs.
"""
