"""Data integrity: check the database and the policy engine, and fix what can be fixed.

OpenZiti's ``/database/check-data-integrity`` and ``/fix-data-integrity`` (``DatabaseRouter``,
``Stores.CheckIntegrity``): one run at a time in the background (a second start while one runs is
``RATE_LIMITED``), its findings kept until the next run as ``{description, fixed}``, at most 1,000
of them (then ``tooManyErrors``). A fix runs under the write lock: when anything can be fixed it
takes a database snapshot first, then repairs in one batch.

What is checked is what can really go wrong here:

- **the policy engine against the database**: the live graph is compared with one rebuilt from
  the same entities (entities and their attributes, policies and their member sets, and the links
  they make: Dial/Bind services of each identity, edge routers of each identity and service).
  OpenZiti's ``validatePolicyDenormalization`` recomputes its link counts the same way. Fixed by
  rebuilding the engine; identities whose service links changed get a service-update mark.
- **dangling references**: policy ``@id`` roles naming missing entities, services and routers
  listing missing configs, identities' service-config overrides and hosting costs naming missing services or
  configs, identities of a missing auth policy, authenticators, enrollments and MFA enrollments
  of missing identities, enrollments of a missing CA, terminators of a missing service or router,
  configs of a missing config type (reported, not fixed: the config's data would be lost).
- **orphans**: API sessions of a missing identity or CA, Dial/Bind sessions whose API session,
  identity or service is gone, API-session certificates whose API session is gone.

A check reads a copy of the entities and of the graph taken under the write lock, then works
without it (writers wait only for the copy); a fix holds the write lock throughout.

Modules: ``_core`` (a finding, a frozen copy of the store, repairs), ``references`` (the database
checks), ``links`` (the engine against a rebuild), ``runs`` (:class:`IntegrityManager`).
"""

from engine.managers.integrity._core import Problem, StoreView
from engine.managers.integrity.runs import (
    MAX_RESULTS,
    Finding,
    IntegrityManager,
    IntegrityReport,
    find_problems,
)

__all__ = [
    "MAX_RESULTS",
    "Finding",
    "IntegrityManager",
    "IntegrityReport",
    "Problem",
    "StoreView",
    "find_problems",
]
