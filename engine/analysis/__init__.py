"""Access analysis over the policy engine (docs/analysis.md): explanations, what-if diffs and
apply-if-unchanged.

- :mod:`.explain`: why an identity may or may not Dial/Bind a service (and reach an edge router):
  every granting path, the routers, posture, and the nearest misses ranked;
- :mod:`.diff`: the exact access difference between two policy graphs, computed only where
  something changed;
- :mod:`.history`: the access-relevant batches the controller applied, numbered by the store's
  revision, with what undoes each (the diff since a revision);
- :mod:`.sandbox`: proposed management writes run by the real managers against an overlay of the
  store, so they produce exactly the changes a management write would, with nothing written;
- :mod:`.manager`: :class:`AnalysisManager`, the use cases the ``/analysis/v1`` API calls.

Pure engine code: no HTTP, no storage. networkx is not needed here.
"""

from engine.analysis.diff import AccessDiff, PolicyChange, access_diff, touched_by
from engine.analysis.explain import (
    Miss,
    PostureVerdict,
    RouterExplanation,
    ServiceExplanation,
    explain_router,
    explain_service,
)
from engine.analysis.history import AccessHistory, RevisionTooOldError
from engine.analysis.manager import (
    MAX_BATCH_ITEMS,
    AnalysisManager,
    Applied,
    Operation,
    StaleRevisionError,
    WhatIf,
    analysis_for,
)

__all__ = [
    "MAX_BATCH_ITEMS",
    "AccessDiff",
    "AccessHistory",
    "AnalysisManager",
    "Applied",
    "Miss",
    "Operation",
    "PolicyChange",
    "PostureVerdict",
    "RevisionTooOldError",
    "RouterExplanation",
    "ServiceExplanation",
    "StaleRevisionError",
    "WhatIf",
    "access_diff",
    "analysis_for",
    "explain_router",
    "explain_service",
    "touched_by",
]
