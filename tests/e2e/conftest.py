from tests.integration.control_fixtures import control_settings, topic_prefix, topics  # noqa: F401
