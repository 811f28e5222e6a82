from __future__ import annotations

from noetl_cloud.ingress.audit import AuditSampler
from noetl_cloud.observability import Counters
from noetl_cloud.ratelimit import TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_token_bucket_allows_the_burst_then_refills_at_the_rate() -> None:
    clock = Clock()
    bucket = TokenBucket(2.0, burst=3, clock=clock)
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    assert bucket.wait_time() == 0.5 and bucket.retry_after() == 1
    clock.now += 0.5
    assert bucket.take() and not bucket.take()
    clock.now += 10
    assert sum(bucket.take() for _ in range(10)) == 3  # never more than the burst


def test_audit_sampler_admits_one_per_window_and_counts_the_rest() -> None:
    clock = Clock()
    sampler = AuditSampler(window_s=10, clock=clock)
    assert sampler.admit("l", "bad_signature") == 0
    assert [sampler.admit("l", "bad_signature") for _ in range(5)] == [None] * 5
    assert sampler.admit("l", "missing_signature") == 0  # another reason has its own window
    clock.now += 10
    assert sampler.admit("l", "bad_signature") == 5


def test_counters_exposition() -> None:
    counters = Counters()
    counters.inc("ingress_received", listener="a")
    counters.inc("ingress_received", listener="a")
    counters.inc("ingress_rejected", listener="a", reason='bad"sig')
    text = counters.exposition()
    assert 'noetl_ingress_received_total{listener="a"} 2' in text
    assert 'noetl_ingress_rejected_total{listener="a",reason="bad\\"sig"} 1' in text
    assert counters.value("ingress_received", listener="a") == 2
