"""The controller process: what ``trellis`` runs around the API.

The composition root (:mod:`.app`: the store, the managers, the Falcon app of :mod:`api`), the
settings (:mod:`.settings`) and the home on disk (:mod:`.home`), the CLI (:mod:`.cli`), the
serving processes (:mod:`.serve`: gunicorn and its workers, :mod:`.worker`, with the listener's TLS
context, :mod:`.tls`), logging (:mod:`.logs`, :mod:`.accesslog`), the routers' control listener
(:mod:`.control`), the embedded router's supervisor (:mod:`.embedded_router`), periodic
maintenance under one leader (:mod:`.maintenance`) and the controller's identity in a cluster
(:func:`.compose.controller_identity`).

:mod:`api` is the HTTP side only and imports nothing from here but :mod:`.settings`, the
configuration every layer above the engine reads.
"""
