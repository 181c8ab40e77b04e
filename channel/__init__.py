"""OpenZiti's channel v2: the framed, multiplexed connection SDKs, edge routers and the controller
speak over TLS. :mod:`.frames` is the wire format, :mod:`.connection` runs it over asyncio,
:mod:`.edge` holds the SDK <-> router protocol's numbers and :mod:`.control` the router <->
controller messages (docs/dataplane.md)."""
