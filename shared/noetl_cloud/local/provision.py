"""What ``local up`` creates in the services once they answer: the schema (the migrations), the
Pub/Sub topics, the emulator's push subscriptions to the local worker and projector, and the stack's
own spool bucket. Each step is idempotent; ``local/docker-compose.yml``'s one-shot ``setup``
(:mod:`noetl_cloud.local.compose`) runs the same steps for its containers.
"""

from __future__ import annotations

from noetl_cloud.local.components import PROJECT_ID

#: The stack's own spool (fake-gcs-server), for every subscription that spools.
SPOOL_BUCKET = "noetl-local-spool"


def migrate(env: dict[str, str]) -> None:
    from noetl_cloud.db.engine import create_db_engine
    from noetl_cloud.db.migrate import upgrade
    from noetl_cloud.settings import Settings

    engine = create_db_engine(Settings(database_url=env["NOETL_DATABASE_URL"]), pool_size=1)
    try:
        upgrade(engine)
    finally:
        engine.dispose()


def ensure_topics(env: dict[str, str], pools: tuple[str, ...]) -> list[str]:
    """The Pub/Sub topics the roles publish to: one command topic per pool, and the events topic."""
    from noetl_cloud.messaging.pubsub import PubSubPublisher
    from noetl_cloud.settings import Settings

    defaults = Settings()
    topics = [defaults.command_topic(pool) for pool in pools] + [defaults.events_topic]
    PubSubPublisher(PROJECT_ID, emulator_host=env["PUBSUB_EMULATOR_HOST"]).ensure_topics(topics)
    return topics


def ensure_worker_push(env: dict[str, str], port: int) -> str:
    """The push subscription of pool ``shared``'s command topic to the local worker on ``port``."""
    from noetl_cloud.settings import Settings

    topic = Settings().command_topic("shared")
    ensure_push(env, topic, f"{topic}-worker", f"http://127.0.0.1:{port}/?token={env['NOETL_WORKER_PUSH_TOKEN']}")
    return f"{topic} → worker (port {port})"


def ensure_projector_push(env: dict[str, str], port: int) -> str:
    """The push subscription of ``noetl-events`` to the local projector on ``port``.

    Unordered, unlike Terraform's: the emulator's ordered push holds a thread per ordering key
    (an execution), and tens of thousands of executions (the runtime's soak, a benchmark) grew it
    past 20,000 threads and the machine's load past 10,000. The projector does not need the order:
    a delivery folds its execution up to the tip, so deliveries in any order converge."""
    from noetl_cloud.settings import Settings

    topic = Settings().events_topic
    endpoint = f"http://127.0.0.1:{port}/?token={env['NOETL_PROJECTOR_PUSH_TOKEN']}"
    ensure_push(env, topic, f"{topic}-projector", endpoint)
    return f"{topic} → projector (port {port})"


def ensure_push(env: dict[str, str], topic: str, subscription: str, endpoint: str) -> None:
    """Create the emulator's (unordered) push subscription, or point an existing one at ``endpoint``;
    one an earlier version created with message ordering is created again without."""
    from google.api_core.exceptions import AlreadyExists
    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

    from noetl_cloud.demo.setup import emulator

    with emulator(env["PUBSUB_EMULATOR_HOST"]):
        subscriber = pubsub_v1.SubscriberClient()
        name = subscriber.subscription_path(PROJECT_ID, subscription)
        request = {
            "name": name,
            "topic": f"projects/{PROJECT_ID}/topics/{topic}",
            "push_config": {"push_endpoint": endpoint},
            "ack_deadline_seconds": 60,
        }
        try:
            try:
                subscriber.create_subscription(request=request)
            except AlreadyExists:
                if subscriber.get_subscription(subscription=name).enable_message_ordering:
                    subscriber.delete_subscription(subscription=name)
                    subscriber.create_subscription(request=request)
                else:
                    subscriber.modify_push_config(
                        request={"subscription": name, "push_config": {"push_endpoint": endpoint}}
                    )
        finally:
            subscriber.close()


def ensure_spool_bucket(env: dict[str, str]) -> None:
    """The stack's spool bucket, created unless it exists."""
    from google.api_core.exceptions import Conflict

    from noetl_cloud.objectstore import gcs_client

    client = gcs_client(env["STORAGE_EMULATOR_HOST"], PROJECT_ID)
    try:
        if client.lookup_bucket(SPOOL_BUCKET) is None:
            client.create_bucket(SPOOL_BUCKET)
    except Conflict:  # created meanwhile
        pass
    finally:
        client.close()
