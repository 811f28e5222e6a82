from tests.integration.replay_fixtures import (  # noqa: F401 - fixtures of the replay, projector and outbox tests
    events_topic,
    events_topic_name,
    projector_client,
    projector_role,
    rclient,
    replay_settings,
    rplane,
)
