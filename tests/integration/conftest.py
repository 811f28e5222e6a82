from tests.integration.control_fixtures import client, control_settings, plane, ready, topic_prefix, topics  # noqa: F401
from tests.integration.kafka_fixtures import kafka_servers, kafka_topic  # noqa: F401 - the stack's Kafka broker
from tests.unit.engine.conftest import api  # noqa: F401 - the HTTP service the pagination goldens call
