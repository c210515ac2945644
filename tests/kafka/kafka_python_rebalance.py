"""kafka-python (3.x) against `sluice serve`: a member joining a group hands partitions
over without any record read twice (the kafka-python twin of confluent_rebalance.py).

One member reads a topic slowly, committing what it has read before it rejoins (auto
commit); a second member joins halfway. The listener answers the newcomer's JoinGroup
only once the first member has rejoined, that is, after it gave its partitions up.

Usage: python3 kafka_python_rebalance.py HOST:PORT TOPIC
Prints one line per step; exits non-zero on the first failed check.
"""

import sys
import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic
from kafka.consumer.subscription_state import ConsumerRebalanceListener

from checks import check, check_hand_over, step

BOOTSTRAP, TOPIC = sys.argv[1], sys.argv[2]
PARTITIONS = 4
RECORDS = 2000


admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP)
admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)])
admin.close()
producer = KafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all", linger_ms=5)
for i in range(RECORDS):
    producer.send(TOPIC, key=f"key-{i}".encode(), value=f"value-{i}".encode())
producer.flush(timeout=20)
producer.close()
step(f"produced {RECORDS} records into {PARTITIONS} partitions")

reads = {}  # (partition, offset) -> how many times read
revocations = []


class NoteRevocations(ConsumerRebalanceListener):
    def __init__(self, name):
        self.name = name

    def on_partitions_revoked(self, revoked):
        revocations.append((self.name, sorted(tp.partition for tp in revoked)))

    def on_partitions_assigned(self, assigned):
        pass


def member(name):
    # With auto-commit on, kafka-python commits its positions synchronously before it
    # rejoins (and so before it gives partitions up); the interval keeps it from
    # committing at any other time in this test.
    c = KafkaConsumer(bootstrap_servers=BOOTSTRAP, group_id="kp-handoff", enable_auto_commit=True,
                      auto_commit_interval_ms=600_000, auto_offset_reset="earliest", session_timeout_ms=6000,
                      heartbeat_interval_ms=300, max_poll_records=10)
    c.subscribe([TOPIC], listener=NoteRevocations(name))
    return c


def read(c, limit):
    """One poll of at most `limit` records (a slow consumer)."""
    for recs in c.poll(timeout_ms=50, max_records=limit).values():
        for r in recs:
            key = (r.partition, r.offset)
            reads[key] = reads.get(key, 0) + 1


first = member("first")
deadline = time.time() + 30
while len(reads) < RECORDS // 4 and time.time() < deadline:
    read(first, 10)
check(len(reads) >= RECORDS // 4, f"the first member read {len(reads)} records in 30 s")
step(f"the first member read {len(reads)} records alone")

second = member("second")
deadline = time.time() + 60
while len(reads) < RECORDS and time.time() < deadline:
    read(first, 10)
    read(second, 10)
a1 = {tp.partition for tp in first.assignment()}
a2 = {tp.partition for tp in second.assignment()}
first.close()
second.close()

check_hand_over(reads, RECORDS, PARTITIONS, a1, a2, revocations)
