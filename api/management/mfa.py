"""``DELETE /identities/{id}/mfa`` (admin): remove an identity's MFA enrollment, verified or not.

For an identity that can no longer produce codes (seed 001). 404 for an unknown identity; an
identity without MFA answers 200 all the same (OpenZiti deletes whatever is there).
"""

from __future__ import annotations

import falcon

from api.controller import Controller
from api.http import empty
from api.middleware import ADMIN
from api.routing import Routes


class IdentityMfa:
    auth = ADMIN

    def __init__(self, ctrl: Controller) -> None:
        self.manager = ctrl.managers.mfa

    def on_delete(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        """Remove the MFA enrollment of an identity."""
        self.manager.remove_for_identity(id)
        empty(resp)


def register(routes: Routes) -> None:
    routes.management("/identities/{id}/mfa", IdentityMfa(routes.ctrl))
