"""Publishes sensor readings for examples/subscriptions/sensors.yaml to the local stack's Pub/Sub emulator:
creates the topic ``sensors`` and its pull subscription ``sensors-pull`` when missing, then publishes COUNT
readings ``{"sensor": "s-<i>", "celsius": <n>}``.

    eval "$(.venv/bin/noetl-cloud local env)"
    .venv/bin/python examples/subscriptions/publish.py 5
"""

from __future__ import annotations

import argparse
import json
import os

from google.api_core.exceptions import AlreadyExists
from google.cloud import pubsub_v1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("count", type=int, nargs="?", default=5, help="readings to publish (5)")
    args = parser.parse_args()
    if not os.environ.get("PUBSUB_EMULATOR_HOST"):
        raise SystemExit('PUBSUB_EMULATOR_HOST is not set: run  eval "$(.venv/bin/noetl-cloud local env)"  first')
    project = os.environ.get("PUBSUB_PROJECT_ID", "noetl-local")
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic = publisher.topic_path(project, "sensors")
    subscription = subscriber.subscription_path(project, "sensors-pull")
    try:
        publisher.create_topic(name=topic)
    except AlreadyExists:
        pass
    try:
        subscriber.create_subscription(name=subscription, topic=topic)
    except AlreadyExists:
        pass
    for index in range(args.count):
        reading = {"sensor": f"s-{index}", "celsius": 25 + 3 * index}
        publisher.publish(topic, json.dumps(reading).encode()).result(timeout=30)
    print(f"published {args.count} readings to {topic}; {subscription} holds them")


if __name__ == "__main__":
    main()
