"""The HTTP side: Falcon resources for the client and management APIs, the CLI, the wsgi app."""

__version__ = "0.1.0"

#: The OpenZiti controller release whose API Trellis implements; clients gate features on it.
ZITI_COMPAT_VERSION = "v1.6.0"
