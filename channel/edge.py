"""The edge protocol's content types, header ids, flags and error codes (SDK <-> edge router).

The numbers are OpenZiti's (its Go SDK's ``edge`` messages and the C SDK's ``edge_protocol.h``);
docs/dataplane.md says which of them Trellis routers send and accept.
"""

from __future__ import annotations

# -- content types ---------------------------------------------------------------------------------
CONNECT = 60783
STATE_CONNECTED = 60784
STATE_CLOSED = 60785
DATA = 60786
DIAL = 60787
DIAL_SUCCESS = 60788
DIAL_FAILED = 60789
BIND = 60790
UNBIND = 60791
STATE_SESSION_ENDED = 60792
PROBE = 60793
UPDATE_BIND = 60794
HEALTH_EVENT = 60795
TRACE_ROUTE = 60796
TRACE_ROUTE_RESPONSE = 60797
BIND_SUCCESS = 60800
#: A fresh OIDC access token for an open channel (body: the JWT), and the router's answers
#: (failure: the reason in the body).
UPDATE_TOKEN_SUCCESS = 60801
UPDATE_TOKEN_FAILURE = 60802
UPDATE_TOKEN = 60803

#: Edge content types that name a connection (header CONN_ID) on the channel.
CONNECTION_TYPES = frozenset(range(CONNECT, UNBIND + 1)) | {UPDATE_BIND, HEALTH_EVENT}

# -- headers ---------------------------------------------------------------------------------------
CONN_ID = 1000
SEQ = 1001
SESSION_TOKEN = 1002
PUBLIC_KEY = 1003
COST = 1004
PRECEDENCE = 1005
TERMINATOR_IDENTITY = 1006
TERMINATOR_IDENTITY_SECRET = 1007
CALLER_ID = 1008
CRYPTO_METHOD = 1009
FLAGS = 1010
APP_DATA = 1011
ROUTER_PROVIDED_CONN_ID = 1012
HEALTH_STATUS = 1013
ERROR_CODE = 1014
SUPPORTS_BIND_SUCCESS = 1024

#: ``FLAGS`` bit: the sender will send no more data on this connection (half-close).
FIN = 1

#: ``PRECEDENCE`` byte values.
PRECEDENCES = {0: "default", 1: "required", 2: "failed"}

# -- error codes (header ERROR_CODE) ---------------------------------------------------------------
ERROR_INTERNAL = 1
ERROR_INVALID_API_SESSION = 2
ERROR_INVALID_SESSION = 3
ERROR_WRONG_SESSION_TYPE = 4
ERROR_INVALID_EDGE_ROUTER_FOR_SESSION = 5
ERROR_INVALID_SERVICE = 6
ERROR_TUNNELING_NOT_ENABLED = 7
ERROR_INVALID_TERMINATOR = 8
ERROR_INVALID_PRECEDENCE = 9
ERROR_INVALID_COST = 10
ERROR_ENCRYPTION_DATA_MISSING = 11

#: The text OpenZiti answers for errors 2-5; the C SDK keys on it to drop its cached session,
#: fetch a new one and retry the Connect or Bind.
INVALID_SESSION_TEXT = "Invalid Session"
