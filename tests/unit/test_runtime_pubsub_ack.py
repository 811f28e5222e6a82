"""A streamed Pub/Sub message settled after its stream stopped is acked by id: the client's closed
stream manager would drop its ``ack()``, and the message would come back after its deadline and run
again (``noetl-cloud subscribe --local`` stops its source, then lets held messages finish)."""

from __future__ import annotations

from typing import Any

from noetl_cloud.runtime.pubsub import PubSubSource, _Streamed


class Client:
    def __init__(self) -> None:
        self.acked: list[str] = []
        self.released: list[str] = []

    def acknowledge(self, request: dict[str, Any]) -> None:
        self.acked += request["ack_ids"]

    def modify_ack_deadline(self, request: dict[str, Any]) -> None:
        assert request["ack_deadline_seconds"] == 0
        self.released += request["ack_ids"]


class Message:
    def __init__(self, n: int) -> None:
        self.message_id, self.ack_id, self.data, self.attributes = str(n), f"ack-{n}", b"{}", {}
        self.ordering_key, self.publish_time, self.settled = "", None, ""

    def ack(self) -> None:
        self.settled = "ack"

    def nack(self) -> None:
        self.settled = "nack"


class Future:
    def done(self) -> bool:
        return False


def test_a_message_settled_after_the_stream_stopped_is_settled_by_id() -> None:
    source = PubSubSource("projects/p/subscriptions/s")
    client = Client()
    source._client = client  # type: ignore[assignment]
    source._future = Future()
    live, held, refused = Message(1), Message(2), Message(3)
    first, second, third = (_Streamed(m, source) for m in (live, held, refused))
    source._streamed_held = 3
    first.ack()  # the stream is open: through the client's manager
    assert live.settled == "ack" and client.acked == []
    source._future = None  # stopped (``stop`` forgets the future before cancelling it)
    second.ack()
    third.nack()
    assert (held.settled, refused.settled) == ("", "")
    assert client.acked == ["ack-2"] and client.released == ["ack-3"]
    assert source.stats()["streamed_held"] == 0
