"""What the Kafka source (runtime/kafka.py) costs over a bare consumer, on the local stack's broker.

1. **baseline** -- a bare confluent-kafka consumer of a fresh group reading the topic, one commit at
   the end;
2. **source** -- :class:`~noetl_cloud.runtime.kafka.KafkaSource` in Mode B (``max_in_flight``
   records held at most), every record acked from the callback: commits only of acked offsets.

Counted, not timed: records delivered, records delivered twice, commit calls, the group's committed
offsets after close, and this process's CPU seconds per 1,000 records (wall time is printed too, but
the machine is shared). The broker is started as `noetl-cloud local up --with kafka` does.

    .venv/bin/python bench/kafka_source.py [--records 20000] [--max-in-flight 500]

Never fails on timing.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import confluent_kafka  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from noetl_cloud.local.kafka_broker import KafkaBroker  # noqa: E402
from noetl_cloud.local.layout import DEFAULT_PORT_BASE, default_state_dir  # noqa: E402
from noetl_cloud.runtime.kafka import KafkaSource  # noqa: E402
from noetl_cloud.runtime.port import Received  # noqa: E402


def fill(servers: str, records: int) -> str:
    topic = f"bench-{secrets.token_hex(4)}"
    admin = AdminClient({"bootstrap.servers": servers})  # kept alive until the topic exists
    admin.create_topics([NewTopic(topic, num_partitions=2)])[topic].result(30)
    producer = confluent_kafka.Producer({"bootstrap.servers": servers, "linger.ms": 20})
    for n in range(records):
        producer.produce(topic, value=b'{"n": %d}' % n, headers=[("x-n", str(n).encode())])
        if n % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    return topic


def committed(servers: str, topic: str, group: str) -> int:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": servers, "group.id": group})
    try:
        parts = consumer.committed([confluent_kafka.TopicPartition(topic, p) for p in (0, 1)], timeout=30)
        return sum(max(tp.offset, 0) for tp in parts)
    finally:
        consumer.close()


def baseline(servers: str, topic: str, records: int) -> dict[str, Any]:
    group = f"b-{secrets.token_hex(4)}"
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": servers, "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    seen: set[str] = set()
    cpu, wall = time.process_time(), time.monotonic()
    first: float | None = None
    while len(seen) < records and time.monotonic() - wall < 600:
        for record in consumer.consume(500, 1.0):
            if record.error() is None:
                first = first or time.monotonic() - wall
                seen.add(f"{record.partition()}/{record.offset()}")
    consumer.commit(asynchronous=False)
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    consumer.close()
    return {"delivered": len(seen), "first_s": first, "cpu": cpu, "wall": wall, "commits": 1, "group": group}


def source(servers: str, topic: str, records: int, max_in_flight: int) -> dict[str, Any]:
    group = f"s-{secrets.token_hex(4)}"
    kafka = KafkaSource(servers, topic=topic, group=group)
    seen: dict[str, int] = {}
    lock = threading.Lock()
    commits = 0
    real = kafka.consumer
    original = real.commit

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal commits
        commits += 1
        return original(*args, **kwargs)

    class Counting:  # the consumer, counting its commit calls
        def __getattr__(self, name: str) -> Any:
            return counted if name == "commit" else getattr(real, name)

    kafka._consumer = Counting()
    first: list[float] = []
    cpu, wall = time.process_time(), time.monotonic()

    def on_message(delivery: Received) -> None:
        with lock:
            seen[delivery.message.message_id] = seen.get(delivery.message.message_id, 0) + 1
            if not first:
                first.append(time.monotonic() - wall)
        delivery.ack()

    kafka.start(on_message, max_in_flight=max_in_flight)
    while len(seen) < records and time.monotonic() - wall < 600:
        time.sleep(0.05)
    kafka.close()
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    twice = sum(1 for count in seen.values() if count > 1)
    return {
        "delivered": len(seen),
        "twice": twice,
        "first_s": first[0] if first else None,
        "cpu": cpu,
        "wall": wall,
        "commits": commits,
        "group": group,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--max-in-flight", type=int, default=500)
    args = parser.parse_args()
    base = int(os.environ.get("NOETL_LOCAL_PORT_BASE") or DEFAULT_PORT_BASE)
    servers = KafkaBroker(default_state_dir(os.environ, ROOT), base).up(echo=print)["NOETL_KAFKA_BOOTSTRAP_SERVERS"]
    topic = fill(servers, args.records)
    for name, result in (
        ("baseline", baseline(servers, topic, args.records)),
        ("source", source(servers, topic, args.records, args.max_in_flight)),
    ):
        done = committed(servers, topic, result["group"])
        per_k = 1000 * result["cpu"] / max(result["delivered"], 1)
        print(
            f"{name:<9} delivered {result['delivered']:>7,} twice {result.get('twice', 0):>4} "
            f"commits {result['commits']:>6,} committed {done:>7,} first record after {result['first_s'] or 0:5.1f} s "
            f"cpu {per_k * 1000:6.1f} ms/1k records  wall {result['wall']:6.1f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
