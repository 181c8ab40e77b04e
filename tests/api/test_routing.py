"""The shared router (api/routing.py ``SharedRouter``): Falcon's matching compiled once per table
of templates, each app answering with its own resources and Falcon's own 405 and OPTIONS."""

from __future__ import annotations

from typing import Any, cast

import falcon
import falcon.testing
import pytest
from falcon.routing.util import SuffixedMethodNotFoundError

from api.routing import SharedRouter
from tests.conftest import Api


class Things:
    def __init__(self, name: str, *, hide_delete: bool = False) -> None:
        self.name = name
        if hide_delete:
            self.on_delete = None  # type: ignore[method-assign,assignment]  # hidden, as api.resources does

    def on_get(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        resp.media = {"app": self.name, "id": id, "template": req.uri_template}

    def on_delete(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        resp.status = falcon.HTTP_204

    def on_get_count(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {"app": self.name, "count": 2}


class Extra:
    def __init__(self) -> None:
        self.on_post = self.create  # a responder the class does not have

    def create(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.status = falcon.HTTP_201


def make(name: str, **kwargs: Any) -> falcon.testing.TestClient:
    app = falcon.App(router=SharedRouter())
    things = Things(name, **kwargs)
    app.add_route("/things/{id}", things)
    app.add_route("/things", things, suffix="count")
    app.add_route("/extra", Extra())
    return falcon.testing.TestClient(app)


def router_of(client: falcon.testing.TestClient) -> SharedRouter:
    return cast(SharedRouter, client.app._router)


def test_each_app_answers_with_its_own_resources_through_one_matcher() -> None:
    one, two = make("one"), make("two")

    assert one.simulate_get("/things/7").json == {"app": "one", "id": "7", "template": "/things/{id}"}
    assert two.simulate_get("/things/8").json == {"app": "two", "id": "8", "template": "/things/{id}"}
    assert two.simulate_get("/things").json == {"app": "two", "count": 2}
    assert one.simulate_post("/extra").status_code == 201
    assert one.simulate_get("/nothing").status_code == 404
    routers = [router_of(client) for client in (one, two)]
    assert routers[0]._matcher is routers[1]._matcher
    assert routers[0]._matcher is not None


def test_405_and_options_name_what_the_route_answers() -> None:
    plain, hidden = make("plain"), make("hidden", hide_delete=True)

    assert plain.simulate_delete("/things/1").status_code == 204
    refused = hidden.simulate_delete("/things/1")
    assert refused.status_code == 405
    assert refused.headers["allow"] == "GET, OPTIONS"
    assert plain.simulate_put("/things/1").headers["allow"] == "DELETE, GET, OPTIONS"
    assert plain.simulate_options("/things/1").headers["allow"] == "DELETE, GET"
    assert hidden.simulate_options("/things/1").headers["allow"] == "GET"


def test_another_table_gets_its_own_matcher() -> None:
    app = falcon.App(router=SharedRouter())
    app.add_route("/other/{id}", Things("other"))
    client = falcon.testing.TestClient(app)

    assert client.simulate_get("/other/3").json["template"] == "/other/{id}"
    assert client.simulate_get("/things/3").status_code == 404
    assert router_of(client)._matcher is not router_of(make("x"))._matcher


def test_a_suffix_without_responders_is_refused_as_falcon_refuses_it() -> None:
    with pytest.raises(SuffixedMethodNotFoundError):
        falcon.App(router=SharedRouter()).add_route("/x", Things("x"), suffix="nothing")


def test_the_controllers_405_names_the_methods_left(api: Api) -> None:
    created = api.post("/identities", json={"name": "routed", "type": "Default", "isAdmin": False})
    assert created.status_code == 201
    refused = api.post(f"/identities/{created.json['data']['id']}")
    assert refused.status_code == 405
    assert refused.headers["allow"] == "DELETE, GET, PATCH, PUT, OPTIONS"  # as Falcon orders it
