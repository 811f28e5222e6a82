from tests.e2e.stack_api import stack_api, stack_env  # noqa: F401 - the stack with its roles (console, CLI)
from tests.integration.control_fixtures import control_settings, topic_prefix, topics  # noqa: F401
from tests.integration.kafka_fixtures import kafka_servers, kafka_topic  # noqa: F401 - the stack's Kafka broker
from tests.unit.engine.conftest import api  # noqa: F401 - the HTTP service the pagination goldens call
