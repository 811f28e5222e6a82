from __future__ import annotations

import pytest

from noetl_cloud.ingress.verify import BadToken, MissingToken, VerifyConfig, verify

CONFIG = VerifyConfig.from_mapping({"type": "bearer", "query_param": "token"})


def test_query_token_verifies_only_from_the_named_parameter() -> None:
    identity = verify(b"{}", {}, CONFIG, "s3cret", query={"token": "s3cret"})
    assert identity.scheme == "bearer"
    with pytest.raises(MissingToken):
        verify(b"{}", {"Authorization": "Bearer s3cret"}, CONFIG, "s3cret", query={})
    with pytest.raises(BadToken) as info:
        verify(b"{}", {}, CONFIG, "s3cret", query={"token": "guess"})
    assert info.value.status == 401 and "guess" not in info.value.message
