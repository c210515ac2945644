"""confluent-kafka (librdkafka 2.16) against sluice: topics have ids, and the client,
seeing them, fetches by id (Fetch v13+) after Metadata v12.

Usage: python3 confluent_topic_ids.py HOST:PORT TOPIC
Prints one line per step; exits non-zero on the first failed check.
"""

import logging
import re
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition, TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic

from checks import check, step

BOOTSTRAP, TOPIC = sys.argv[1], sys.argv[2]
PARTITIONS = 3
RECORDS = 600
COMMON = {"bootstrap.servers": BOOTSTRAP, "broker.address.family": "v4"}


class Sent(logging.Handler):
    """Collects the versions of the requests librdkafka logs as sent (debug=protocol)."""

    def __init__(self):
        super().__init__()
        self.versions = {}

    def emit(self, record):
        for api, v in re.findall(r"Sent (\w+)Request \(v(\d+)", record.getMessage()):
            self.versions.setdefault(api, set()).add(int(v))


admin = AdminClient(COMMON)
admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)])[TOPIC].result(timeout=10)
described = admin.describe_topics(TopicCollection([TOPIC]))[TOPIC].result(timeout=10)
topic_id = str(described.topic_id)
check(described.topic_id is not None and topic_id != "AAAAAAAAAAAAAAAAAAAAAA", f"topic id {topic_id}")
step(f"admin: {TOPIC} created; describe_topics gives its id {topic_id}")

p = Producer({**COMMON, "acks": "all", "linger.ms": 5})
for i in range(RECORDS):
    p.produce(TOPIC, key=f"k{i}".encode(), value=f"v{i}".encode())
check(p.flush(20) == 0, "flush left messages")
step(f"produced {RECORDS} records")

sent = Sent()
log = logging.getLogger("rdkafka")
log.setLevel(logging.DEBUG)
log.addHandler(sent)
c = Consumer({**COMMON, "group.id": f"{TOPIC}-reader", "enable.auto.commit": False, "debug": "protocol",
              "logger": log})
c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
values = []
deadline = time.time() + 30
while len(values) < RECORDS and time.time() < deadline:
    m = c.poll(0.5)
    if m is None:
        continue
    check(m.error() is None, f"consume error {m.error()}")
    values.append(m.value().decode())
c.close()
check(sorted(values) == sorted(f"v{i}" for i in range(RECORDS)), f"read {len(values)} of {RECORDS}, each once")
fetch = sent.versions.get("Fetch", set())
metadata = sent.versions.get("Metadata", set())
check(fetch and min(fetch) >= 13, f"Fetch versions sent {sorted(fetch)} (topic ids from v13)")
check(12 in metadata, f"Metadata versions sent {sorted(metadata)}")
step(f"consumed {len(values)} records, each once, with Fetch v{sorted(fetch)} after Metadata v{sorted(metadata)}")

# Deleted and created again: a new id.
admin.delete_topics([TOPIC])[TOPIC].result(timeout=10)
deadline = time.time() + 10
while True:
    try:
        admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1)])[TOPIC].result(timeout=10)
        break
    except Exception as e:  # the delete may not be seen yet by the client's metadata
        check(time.time() < deadline, f"creating {TOPIC} again: {e}")
        time.sleep(0.2)
again = admin.describe_topics(TopicCollection([TOPIC]))[TOPIC].result(timeout=10)
check(str(again.topic_id) != topic_id, f"the recreated topic has a new id ({again.topic_id} vs {topic_id})")
step(f"deleted and created again: new id {again.topic_id}")
print("OK", flush=True)
