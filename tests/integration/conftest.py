from tests.integration.control_fixtures import client, control_settings, plane, topic_prefix, topics  # noqa: F401
