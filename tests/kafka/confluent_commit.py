"""confluent-kafka (librdkafka) commits an offset for a consumer group against `sluice
serve`, synchronously, and reads it back: used by tests/metrics_serve.rs to see the
group's committed offset and lag in the metrics.

Usage: python3 confluent_commit.py HOST:PORT TOPIC GROUP OFFSET
Prints one line per step; exits non-zero on the first failed check.
"""

import sys

from confluent_kafka import Consumer, TopicPartition

from checks import check, step

BOOTSTRAP, TOPIC, GROUP, OFFSET = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

consumer = Consumer(
    {"bootstrap.servers": BOOTSTRAP, "broker.address.family": "v4", "group.id": GROUP, "enable.auto.commit": False}
)
consumer.commit(offsets=[TopicPartition(TOPIC, 0, OFFSET)], asynchronous=False)
step(f"committed offset {OFFSET} of {TOPIC}[0] for group {GROUP}")
got = consumer.committed([TopicPartition(TOPIC, 0)], timeout=10)
check(got[0].offset == OFFSET, f"committed offset reads back: {got[0].offset}")
consumer.close()
print("OK")
