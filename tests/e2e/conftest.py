from tests.integration.control_fixtures import control_settings, topic_prefix, topics  # noqa: F401
from tests.unit.engine.conftest import api  # noqa: F401 - the HTTP service the pagination goldens call
