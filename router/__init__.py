"""The Trellis edge router: the program (``trellis router``) OpenZiti SDKs connect to.

It enrolls once with an edge router's one-time JWT (:mod:`.enroll`), keeps its keys and
certificates in its own directory (:mod:`.config`), listens for SDK channels (:mod:`.edge`: the
edge protocol, Dial to Bind relaying), keeps a control connection to the controller
(:mod:`.control`) and links to the other routers (:mod:`.links`: a Dial on one router reaches a
terminator on another). :mod:`.ports` is what the edge side needs of the control side. The router
imports nothing of the controller (``engine``, ``api``, ``storage``): it shares only the wire
format (``channel``) and certificate helpers (``pki``). docs/dataplane.md describes it.
"""
