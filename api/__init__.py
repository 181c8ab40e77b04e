"""The HTTP side: Falcon resources for the client and management APIs, the CLI, the wsgi app."""

__version__ = "0.1.0"
