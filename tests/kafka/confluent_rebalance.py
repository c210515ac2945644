"""confluent-kafka (librdkafka) against `sluice serve`: a member joining a group hands
partitions over without any record read twice.

One member reads a topic slowly, committing what it has read whenever partitions are
revoked; a second member joins halfway. Kafka's join barrier holds the newcomer's join
until the first member has rejoined, that is, until it has given up its partitions and
committed its positions, so the newcomer starts where the first stopped.

Usage: python3 confluent_rebalance.py HOST:PORT TOPIC
Prints one line per step; exits non-zero on the first failed check.
"""

import sys
import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from checks import check, check_hand_over, step

BOOTSTRAP, TOPIC = sys.argv[1], sys.argv[2]
PARTITIONS = 4
RECORDS = 2000
COMMON = {"bootstrap.servers": BOOTSTRAP, "broker.address.family": "v4"}


admin = AdminClient(COMMON)
for f in admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)]).values():
    f.result(timeout=10)
p = Producer({**COMMON, "acks": "all", "linger.ms": 5})
for i in range(RECORDS):
    p.produce(TOPIC, key=f"key-{i}".encode(), value=f"value-{i}".encode())
check(p.flush(20) == 0, "flush left messages")
step(f"produced {RECORDS} records into {PARTITIONS} partitions")

reads = {}  # (partition, offset) -> how many times read
revocations = []


def member(name):
    c = Consumer({**COMMON, "group.id": "cg-handoff", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                  "heartbeat.interval.ms": 300, "fetch.max.bytes": 1000000, "message.max.bytes": 1000000,
                  "max.partition.fetch.bytes": 1024})

    def on_revoke(consumer, partitions):
        # Give the partitions up with their positions committed, as a careful consumer does.
        if partitions:
            consumer.commit(asynchronous=False)
        revocations.append((name, sorted(tp.partition for tp in partitions)))

    c.subscribe([TOPIC], on_revoke=on_revoke)
    return c


def read(c, seconds, limit):
    """Reads at most `limit` records (a slow consumer) within `seconds`."""
    n = 0
    deadline = time.time() + seconds
    while time.time() < deadline and n < limit:
        m = c.poll(0.05)
        if m is None:
            continue
        check(m.error() is None, f"consume error {m.error()}")
        key = (m.partition(), m.offset())
        reads[key] = reads.get(key, 0) + 1
        n += 1
    return n


first = member("first")
deadline = time.time() + 30
while len(reads) < RECORDS // 4 and time.time() < deadline:
    read(first, 0.2, 20)
check(len(reads) >= RECORDS // 4, f"the first member read {len(reads)} records in 30 s")
step(f"the first member read {len(reads)} records alone")

second = member("second")
deadline = time.time() + 60
while len(reads) < RECORDS and time.time() < deadline:
    read(first, 0.05, 10)
    read(second, 0.05, 10)
a1 = {tp.partition for tp in first.assignment()}
a2 = {tp.partition for tp in second.assignment()}
first.close()
second.close()

check_hand_over(reads, RECORDS, PARTITIONS, a1, a2, revocations)
