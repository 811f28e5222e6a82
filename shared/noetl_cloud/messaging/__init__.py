"""Messaging: the publisher port and its Pub/Sub and in-memory adapters."""

from noetl_cloud.messaging.port import OutboundMessage, Publisher, PublishFailed

__all__ = ["OutboundMessage", "PublishFailed", "Publisher"]
