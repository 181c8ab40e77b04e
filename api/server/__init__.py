"""The HTTP server that ``trellis serve`` runs: gunicorn's one worker (:mod:`.worker`, an
HTTP/1.1 server on one event loop), the gunicorn set-up (:mod:`.serve`), the listener's TLS
context (:mod:`.tls`), the peer's certificate chain (:mod:`.peer`), request limits and the
authentication budget (:mod:`.limits`) and the access log (:mod:`.accesslog`).

Nothing here knows the Edge APIs: the app (:mod:`api.app`) is a Falcon WSGI app this server runs.
"""
