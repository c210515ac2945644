"""confluent-kafka (librdkafka) with a small fetch.max.bytes against `sluice serve`, as
librdkafka's own test 0082: 3 partitions of 10 records of 900 KiB, consumed with
max.partition.fetch.bytes 20 MB, fetch.max.bytes 1 MB and receive.message.max.bytes
1 MB + 512. A response larger than the last closes the connection on the client's side;
before the listener kept to max_bytes, the consumer retried forever.

Usage: python3 confluent_fetch_limits.py HOST:PORT TOPIC
Prints one line per step; exits non-zero on the first failed check.
"""

import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from checks import check, step

BOOTSTRAP, TOPIC = sys.argv[1], sys.argv[2]
COMMON = {"bootstrap.servers": BOOTSTRAP, "broker.address.family": "v4"}
PARTITIONS, PER_PARTITION, SIZE = 3, 10, 900 * 1024

admin = AdminClient(COMMON)
admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)])[TOPIC].result(timeout=10)
p = Producer({**COMMON, "linger.ms": 5})
for part in range(PARTITIONS):
    for i in range(PER_PARTITION):
        p.produce(TOPIC, value=bytes([part * 16 + i]) * SIZE, partition=part)
    check(p.flush(30) == 0, "flush")
step(f"produced {PARTITIONS} x {PER_PARTITION} records of {SIZE} bytes")

c = Consumer({**COMMON, "group.id": TOPIC, "auto.offset.reset": "earliest",
              "max.partition.fetch.bytes": 20_000_000, "fetch.max.bytes": 1_000_000,
              "receive.message.max.bytes": 1_000_512})
c.subscribe([TOPIC])
seen = set()
deadline = time.time() + 60
while len(seen) < PARTITIONS * PER_PARTITION and time.time() < deadline:
    m = c.poll(1.0)
    if m is None:
        continue
    if m.error():
        raise KafkaException(m.error())
    check(len(m.value()) == SIZE and m.value()[0] == m.partition() * 16 + m.offset(), "the record's bytes")
    seen.add((m.partition(), m.offset()))
c.close()
check(len(seen) == PARTITIONS * PER_PARTITION, f"consumed {len(seen)} of {PARTITIONS * PER_PARTITION} in 60 s")
step(f"consumed all {len(seen)} with fetch.max.bytes 1 MB and receive.message.max.bytes 1 MB + 512")
print("OK", flush=True)
