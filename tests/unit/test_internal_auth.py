from __future__ import annotations

from collections.abc import Callable

import pytest
from flask import Flask, g
from pydantic import SecretStr

from noetl_cloud.auth.google_oidc import JwksCache
from noetl_cloud.auth.internal import BEARER_PRINCIPAL, Caller, InternalAuth, install
from noetl_cloud.auth.roles import EVERY_ROLE, POLICY
from noetl_cloud.errors import ConfigError, NoetlError
from noetl_cloud.settings import Settings
from noetl_cloud.web import create_app
from tests.unit.test_google_oidc import AUDIENCE, NOW, SA, FakeGoogle, rsa_key

TOKEN = "s3cret-internal-token-0123456789"


@pytest.fixture
def google() -> FakeGoogle:
    return FakeGoogle()


def make_auth(google: FakeGoogle, token: str | None = None) -> InternalAuth:
    """Both modes when ``token`` is given, Google ID tokens only otherwise."""
    return InternalAuth(
        token=token,
        audience=AUDIENCE,
        allowed_emails=[SA],
        keys=JwksCache(fetch=google.fetch, clock=lambda: 0.0),
        now=lambda: NOW,
    )


def refused(call: Callable[[], object]) -> NoetlError:
    with pytest.raises(NoetlError) as info:
        call()
    return info.value


# -- construction --------------------------------------------------------------------------------


def test_no_mode_configured_is_a_config_error_naming_the_variable() -> None:
    with pytest.raises(ConfigError) as info:
        InternalAuth()
    assert "NOETL_INTERNAL_API_TOKEN" in info.value.message
    assert info.value.code == "config_missing"
    with pytest.raises(ConfigError):
        InternalAuth(token="")
    with pytest.raises(ConfigError):
        InternalAuth.from_settings(Settings())


def test_id_token_mode_without_allowed_service_accounts_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="allowed service account"):
        InternalAuth(audience=AUDIENCE)
    with pytest.raises(ConfigError):
        InternalAuth(audience=AUDIENCE, allowed_emails=[])
    with pytest.raises(ConfigError):
        InternalAuth(audience=AUDIENCE, allowed_emails=SA)


def test_token_is_read_from_settings_as_a_secret() -> None:
    auth = InternalAuth.from_settings(Settings(internal_api_token=SecretStr(TOKEN)))
    assert auth.methods == ("bearer",)
    assert auth.authenticate(f"Bearer {TOKEN}") == Caller(BEARER_PRINCIPAL, "bearer", EVERY_ROLE)


# -- bearer --------------------------------------------------------------------------------------


def test_right_bearer_token_authenticates_whatever_the_scheme_case() -> None:
    auth = InternalAuth(token=TOKEN)
    for header in (f"Bearer {TOKEN}", f"bearer {TOKEN}", f"BEARER  {TOKEN} "):
        assert auth.authenticate(header) == Caller(BEARER_PRINCIPAL, "bearer", EVERY_ROLE)


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer ", f"Basic {TOKEN}", TOKEN, f"Bearer {TOKEN} extra"])
def test_missing_or_non_bearer_header_is_missing_credentials(header: str | None) -> None:
    err = refused(lambda: InternalAuth(token=TOKEN).authenticate(header))
    assert (err.status, err.code) == (401, "missing_credentials")


@pytest.mark.parametrize("presented", ["wrong", TOKEN[:-1], TOKEN + "x", TOKEN.upper(), "a.b.c"])
def test_wrong_bearer_token_is_bad_credentials(presented: str) -> None:
    err = refused(lambda: InternalAuth(token=TOKEN).authenticate(f"Bearer {presented}"))
    assert (err.status, err.code) == (401, "bad_credentials")
    assert TOKEN not in err.message and presented not in str(err.to_dict())


def test_bearer_tokens_are_held_as_digests_and_a_near_miss_is_refused() -> None:
    # The token is looked up by its SHA-256 digest: the object keeps no token, and a token sharing a
    # prefix, a length or all but one character with the real one is just as wrong as any other.
    auth = InternalAuth(token=TOKEN)
    assert TOKEN not in repr(vars(auth))
    for near in (TOKEN[:-1], TOKEN + "x", TOKEN[:-1] + ("a" if TOKEN[-1] != "a" else "b")):
        refused(lambda near=near: auth.authenticate(f"Bearer {near}"))
    assert auth.authenticate(f"Bearer {TOKEN}").method == "bearer"


def test_id_token_only_mode_verifies_every_token(google: FakeGoogle) -> None:
    auth = make_auth(google)
    assert auth.methods == ("google_id_token",)
    assert auth.authenticate(f"Bearer {google.mint()}") == Caller(SA, "google_id_token", EVERY_ROLE)
    assert refused(lambda: auth.authenticate(f"Bearer {TOKEN}")).code == "oidc_malformed"


def test_both_modes_route_jwts_to_oidc_and_the_rest_to_the_bearer_compare(google: FakeGoogle) -> None:
    auth = make_auth(google, TOKEN)
    assert auth.methods == ("bearer", "google_id_token")
    assert auth.authenticate(f"Bearer {TOKEN}").method == "bearer"
    assert auth.authenticate(f"Bearer {google.mint()}") == Caller(SA, "google_id_token", EVERY_ROLE)
    assert refused(lambda: auth.authenticate("Bearer not-the-token")).code == "bad_credentials"
    assert refused(lambda: auth.authenticate(f"Bearer {google.mint(key=rsa_key('x'))}")).code == "oidc_bad_signature"
    err = refused(lambda: auth.authenticate(f"Bearer {google.mint(email='other@p.iam.gserviceaccount.com')}"))
    assert (err.status, err.code) == (403, "oidc_wrong_sa")


def test_a_jwt_shaped_shared_token_still_works_as_a_bearer(google: FakeGoogle) -> None:
    auth = make_auth(google, "aaa.bbb.ccc")
    assert auth.authenticate("Bearer aaa.bbb.ccc").method == "bearer"
    assert google.fetches == []


# -- the Flask hook ------------------------------------------------------------------------------


@pytest.fixture
def app(google: FakeGoogle, monkeypatch: pytest.MonkeyPatch) -> Flask:
    # A service of the tests' own, whose two /api routes every caller role may call (auth.roles.POLICY).
    monkeypatch.setitem(POLICY, "test", {("GET", "/api/x"): EVERY_ROLE, ("GET", "/api"): EVERY_ROLE})
    app = create_app("test", Settings())
    install(app, make_auth(google, TOKEN))

    @app.get("/api/x")
    def api_x() -> dict[str, str]:
        caller: Caller = g.caller
        return {"principal": caller.principal, "method": caller.method}

    @app.get("/api")
    def api_root() -> dict[str, str]:
        return {"principal": g.caller.principal}

    @app.get("/apix")
    def not_api() -> dict[str, bool]:
        return {"caller_set": "caller" in g}

    return app


def test_healthz_and_paths_outside_the_prefix_stay_open(app: Flask) -> None:
    client = app.test_client()
    assert client.get("/healthz").status_code == 200
    response = client.get("/apix")
    assert response.status_code == 200 and response.get_json() == {"caller_set": False}


def test_api_routes_refuse_calls_without_credentials_with_the_json_error_model(app: Flask) -> None:
    client = app.test_client()
    for path in ("/api/x", "/api", "/api/does-not-exist"):
        response = client.get(path)
        assert response.status_code == 401
        assert response.get_json()["error"]["code"] == "missing_credentials"
        assert response.headers["X-Request-Id"]


def test_wrong_token_is_401_bad_credentials(app: Flask) -> None:
    response = app.test_client().get("/api/x", headers={"Authorization": "Bearer nope"})
    assert response.status_code == 401
    assert response.get_json()["error"]["code"] == "bad_credentials"


def test_authenticated_caller_is_in_g(app: Flask, google: FakeGoogle) -> None:
    client = app.test_client()
    response = client.get("/api/x", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    assert response.get_json() == {"principal": BEARER_PRINCIPAL, "method": "bearer"}
    response = client.get("/api/x", headers={"Authorization": f"Bearer {google.mint()}"})
    assert response.get_json() == {"principal": SA, "method": "google_id_token"}


def test_valid_token_of_the_wrong_service_account_is_403(app: Flask, google: FakeGoogle) -> None:
    token = google.mint(email="intruder@p.iam.gserviceaccount.com")
    response = app.test_client().get("/api/x", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 403
    assert response.get_json()["error"]["code"] == "oidc_wrong_sa"
