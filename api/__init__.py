"""The HTTP side: the Falcon resources of the client, management and fabric APIs, their wire
schemas and the request plumbing they share. The process that serves them (composition, server,
control listener, CLI) is :mod:`controller`."""

__version__ = "0.1.0"

#: The OpenZiti controller release whose API Trellis implements; clients gate features on it.
ZITI_COMPAT_VERSION = "v1.6.0"

#: The WSGI environ key under which a request's id is left (``api.middleware``) for its access log
#: line (``controller.accesslog``).
REQUEST_ID_KEY = "trellis.request_id"
