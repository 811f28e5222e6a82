"""The frames role's lease API and the projector's push endpoint and replay API under bad input
(hypothesis), against PostgreSQL: every route, with and without credentials, answers malformed paths,
queries and bodies with a JSON client error (or an honest 503), never a 500."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from noetl_cloud.auth.internal import InternalAuth
from noetl_cloud.frames.app import build_app as frames_app
from noetl_cloud.projector.app import build_app as projector_app
from noetl_cloud.projector.app import push_auth_from_settings
from tests.bad_input import check, requests, routes
from tests.integration.frame_fixtures import TOKEN as FRAMES_TOKEN
from tests.integration.frame_fixtures import Frames
from tests.integration.frame_fixtures import frames as frames
from tests.integration.replay_fixtures import PUSH_TOKEN, TOKEN, ProjectorRole
from tests.integration.replay_fixtures import events_topic as events_topic
from tests.integration.replay_fixtures import events_topic_name as events_topic_name
from tests.integration.replay_fixtures import projector_role as projector_role
from tests.integration.replay_fixtures import replay_settings as replay_settings

FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
CREDENTIALS = st.sampled_from([None, "Bearer nope", "Basic eA==", "Bearer", "", "valid", "push"])


def test_the_frames_api_answers_bad_input_with_json_errors(frames: Frames) -> None:
    stage_id = frames.stage(max_rows=5)
    app = frames_app(frames.plane.settings, frames.service, InternalAuth(token=FRAMES_TOKEN))
    assert {"/api/stages/<int:stage_id>/frames/claim", "/api/frames/<int:frame_id>/commit"} <= {
        rule for rule, _ in routes(app)
    }

    @FUZZ
    @given(data=st.data(), credential=CREDENTIALS, real_stage=st.booleans())
    def run(data: st.DataObject, credential: str | None, real_stage: bool) -> None:
        request = data.draw(requests(app))
        if real_stage and "/stages/" in request["path"]:
            parts = request["path"].split("/")
            request["path"] = "/".join([*parts[:3], stage_id, *parts[4:]])
        token = f"Bearer {FRAMES_TOKEN}" if credential in ("valid", "push") else credential
        check(app.test_client(), request, {"Authorization": token} if token is not None else {})

    run()


def test_the_projector_answers_bad_input_with_json_errors(projector_role: ProjectorRole) -> None:
    app = projector_app(projector_role, push_auth_from_settings(projector_role.settings), InternalAuth(token=TOKEN))
    assert {"/", "/api/projector/status", "/api/replay/state"} <= {rule for rule, _ in routes(app)}

    @FUZZ
    @given(data=st.data(), credential=CREDENTIALS)
    def run(data: st.DataObject, credential: str | None) -> None:
        token = {"valid": f"Bearer {TOKEN}", "push": f"Bearer {PUSH_TOKEN}"}.get(credential or "", credential)
        check(app.test_client(), data.draw(requests(app)), {"Authorization": token} if token is not None else {})

    run()
