"""The local stack's components are the real services, reachable with the official clients."""

from __future__ import annotations

import secrets

import boto3
import pytest
from google.api_core.exceptions import AlreadyExists, PreconditionFailed
from google.auth.credentials import AnonymousCredentials
from google.cloud import firestore, pubsub_v1, storage

PROJECT = "noetl-local"


def test_pubsub_emulator_publishes_and_delivers(local_env: dict[str, str]) -> None:
    suffix = secrets.token_hex(4)  # a fresh topic/subscription per test (emulator quirk)
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    topic = publisher.topic_path(PROJECT, f"smoke-{suffix}")
    sub = subscriber.subscription_path(PROJECT, f"smoke-{suffix}")
    publisher.create_topic(name=topic)
    subscriber.create_subscription(name=sub, topic=topic)
    try:
        ids = [publisher.publish(topic, f"m{i}".encode(), k="v").result(timeout=10) for i in range(3)]
        received: list[bytes] = []
        for _ in range(20):
            response = subscriber.pull(subscription=sub, max_messages=10, timeout=10)
            received += [m.message.data for m in response.received_messages]
            if response.received_messages:
                subscriber.acknowledge(subscription=sub, ack_ids=[m.ack_id for m in response.received_messages])
            if len(received) == 3:
                break
        assert sorted(received) == [b"m0", b"m1", b"m2"] and len(set(ids)) == 3
    finally:
        subscriber.delete_subscription(subscription=sub)
        publisher.delete_topic(topic=topic)
        subscriber.close()


def test_firestore_emulator_transactions_compare_and_set(local_env: dict[str, str]) -> None:
    client = firestore.Client(project=PROJECT, credentials=AnonymousCredentials())
    doc = client.collection("smoke").document(secrets.token_hex(4))
    doc.create({"version": 1})
    with pytest.raises(AlreadyExists):
        doc.create({"version": 1})  # create-if-absent is real
    transaction = client.transaction()

    @firestore.transactional
    def bump(tx: firestore.Transaction) -> int:
        version = doc.get(transaction=tx).get("version")
        tx.update(doc, {"version": version + 1})
        return int(version + 1)

    assert bump(transaction) == 2
    assert doc.get().get("version") == 2
    doc.delete()


def test_gcs_emulator_honours_create_only_uploads(local_env: dict[str, str]) -> None:
    client = storage.Client(project=PROJECT, credentials=AnonymousCredentials())
    bucket = client.create_bucket(f"smoke-{secrets.token_hex(4)}")
    blob = bucket.blob("spool/lane/0001-m1")
    blob.upload_from_string(b"first", if_generation_match=0)
    with pytest.raises(PreconditionFailed):
        bucket.blob("spool/lane/0001-m1").upload_from_string(b"second", if_generation_match=0)
    assert bucket.blob("spool/lane/0001-m1").download_as_bytes() == b"first"
    assert [b.name for b in client.list_blobs(bucket, prefix="spool/")] == ["spool/lane/0001-m1"]


def test_s3_server_stores_objects(local_env: dict[str, str]) -> None:
    s3 = boto3.client("s3", endpoint_url=local_env["NOETL_S3_ENDPOINT_URL"], region_name="us-east-1")
    bucket = f"smoke-{secrets.token_hex(4)}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="a/b", Body=b"payload")
    assert s3.get_object(Bucket=bucket, Key="a/b")["Body"].read() == b"payload"
