"""The execute role's API under bad input (hypothesis): every route, with and without credentials,
answers malformed paths, queries and bodies with a JSON client error, never a 500."""

from __future__ import annotations

from typing import Any

from flask.testing import FlaskClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from noetl_cloud.auth.internal import InternalAuth
from noetl_cloud.control.app import build_app
from noetl_cloud.control.bootstrap import ControlPlane
from tests.bad_input import check, requests, routes
from tests.integration.control_fixtures import TOKEN, Topics, playbook, register

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _app(plane: ControlPlane) -> Any:
    return build_app(plane, InternalAuth(token=TOKEN))


def test_the_route_table_is_what_the_fuzzer_covers(plane: ControlPlane) -> None:
    covered = {rule for rule, _methods in routes(_app(plane))}
    assert {"/api/execute", "/api/events", "/api/commands/<int:command_id>/claim", "/api/catalog"} <= covered


def test_authenticated_bad_input_is_a_json_client_error(
    plane: ControlPlane, client: FlaskClient, topics: Topics
) -> None:
    register(client, playbook("domain/handle"))
    app = _app(plane)

    @FUZZ
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        check(app.test_client(), data.draw(requests(app)), {"Authorization": f"Bearer {TOKEN}"})

    run()


def test_unauthenticated_bad_input_is_a_json_error(plane: ControlPlane) -> None:
    app = _app(plane)

    @settings(max_examples=100, deadline=None)
    @given(data=st.data(), header=st.sampled_from([None, "Bearer nope", "Basic eA==", "Bearer", ""]))
    def run(data: st.DataObject, header: str | None) -> None:
        check(app.test_client(), data.draw(requests(app)), {"Authorization": header} if header is not None else {})

    run()
