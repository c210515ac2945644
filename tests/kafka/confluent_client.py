"""confluent-kafka (librdkafka) against `sluice serve`: admin, idempotent produce, group
consume with committed offsets, and seeking by timestamp.

Usage: python3 confluent_client.py HOST:PORT TOPIC
Prints one line per step; exits non-zero on the first failed check.
"""

import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from checks import check, step

BOOTSTRAP, TOPIC = sys.argv[1], sys.argv[2]
PARTITIONS = 3
RECORDS = 30
BASE_TS = 1_700_000_000_000
COMMON = {"bootstrap.servers": BOOTSTRAP, "broker.address.family": "v4"}


# Admin: create the topic, then see it in the metadata.
admin = AdminClient(COMMON)
for t, f in admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)]).items():
    f.result(timeout=10)
md = admin.list_topics(timeout=10)
check(TOPIC in md.topics, f"{TOPIC} in metadata {list(md.topics)}")
check(len(md.topics[TOPIC].partitions) == PARTITIONS, "partition count")
step(f"admin: created {TOPIC} with {PARTITIONS} partitions; metadata lists it")

# A second create of the same name fails with TOPIC_ALREADY_EXISTS.
try:
    admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1)])[TOPIC].result(timeout=10)
    check(False, "creating an existing topic must fail")
except KafkaException as e:
    check(e.args[0].name() == "TOPIC_ALREADY_EXISTS", f"error {e.args[0]}")
step("admin: creating it again fails with TOPIC_ALREADY_EXISTS")

# Idempotent producer, acks=all: every record delivered exactly once.
delivered = []


def on_delivery(err, msg):
    check(err is None, f"delivery error {err}")
    delivered.append((msg.partition(), msg.offset(), msg.key()))


p = Producer({**COMMON, "enable.idempotence": True, "acks": "all", "linger.ms": 5})
for i in range(RECORDS):
    p.produce(TOPIC, key=f"key-{i % 7}".encode(), value=f"value-{i}".encode(), timestamp=BASE_TS + i * 1000,
              on_delivery=on_delivery)
check(p.flush(20) == 0, "flush left messages")
check(len(delivered) == RECORDS, f"{len(delivered)} delivered")
per_partition = {}
for part, off, _ in delivered:
    per_partition.setdefault(part, []).append(off)
for part, offs in per_partition.items():
    check(sorted(offs) == list(range(len(offs))), f"partition {part} offsets {sorted(offs)} are dense from 0")
step(f"idempotent producer: {RECORDS} records delivered, offsets dense per partition {sorted(per_partition)}")

# Same key, same partition (murmur2, as Kafka's partitioner).
by_key = {}
for part, _, key in delivered:
    by_key.setdefault(key, set()).add(part)
check(all(len(s) == 1 for s in by_key.values()), "each key went to one partition")

# A plain producer with acks=1.
p1 = Producer({**COMMON, "acks": 1})
p1.produce(TOPIC, key=b"plain", value=b"acks1", timestamp=BASE_TS + RECORDS * 1000, on_delivery=on_delivery)
check(p1.flush(20) == 0, "flush acks=1")
total = RECORDS + 1
step("acks=1 producer: 1 record delivered")


def group_consumer(group):
    return Consumer({**COMMON, "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})


# Group consume everything, commit, close.
c = group_consumer("cg-confluent")
c.subscribe([TOPIC])
seen = []
deadline = time.time() + 30
while len(seen) < total and time.time() < deadline:
    m = c.poll(1.0)
    if m is None:
        continue
    check(m.error() is None, f"consume error {m.error()}")
    seen.append((m.partition(), m.offset(), m.value()))
check(len(seen) == total, f"group consumer read {len(seen)} of {total}")
check(len(set(seen)) == total, "no duplicates")
c.commit(asynchronous=False)
assignment = c.assignment()
c.close()
step(f"group consumer: read {len(seen)} records from {len(assignment)} partitions, committed synchronously")

# A new member of the group starts at the committed offsets: nothing left to read.
c = group_consumer("cg-confluent")
committed = c.committed([TopicPartition(TOPIC, i) for i in range(PARTITIONS)], timeout=10)
ends_all = {i: 0 for i in range(PARTITIONS)}
for part, off, _ in seen:
    ends_all[part] = max(ends_all[part], off + 1)
check({tp.partition: tp.offset for tp in committed} == ends_all, f"committed {committed} vs ends {ends_all}")
c.subscribe([TOPIC])
extra = []
deadline = time.time() + 5
while time.time() < deadline:
    m = c.poll(0.5)
    if m is not None and m.error() is None:
        extra.append(m)
c.close()
check(not extra, f"a restarted member re-read {len(extra)} records")
step("group consumer: committed offsets equal the partition ends; a new member reads nothing again")

# Two members of one group split the partitions between them.
c0, c1 = group_consumer("cg-pair"), group_consumer("cg-pair")
c0.subscribe([TOPIC])
read = set()


def drain(c, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        m = c.poll(0.1)
        if m is not None and m.error() is None:
            read.add((m.partition(), m.offset()))


drain(c0, 3)
c1.subscribe([TOPIC])
for _ in range(30):
    drain(c0, 0.1)
    drain(c1, 0.1)
a0 = {tp.partition for tp in c0.assignment()}
a1 = {tp.partition for tp in c1.assignment()}
c0.close()
c1.close()
check(a0 and a1 and not (a0 & a1) and (a0 | a1) == set(range(PARTITIONS)), f"assignments {a0} and {a1}")
check(len(read) == total, f"the pair read {len(read)} distinct records of {total}")
step(f"two group members: disjoint assignments {sorted(a0)} and {sorted(a1)} covering every partition; every record read")

# Seek by timestamp: offsets_for_times, then read from there.
target = BASE_TS + 15_000
c = Consumer({**COMMON, "group.id": "cg-times", "enable.auto.commit": False})
found = c.offsets_for_times([TopicPartition(TOPIC, i, target) for i in range(PARTITIONS)], timeout=10)
checked = 0
for tp in found:
    check(tp.error is None, f"offsets_for_times error {tp.error}")
    if tp.offset < 0:
        continue
    c.assign([TopicPartition(TOPIC, tp.partition, tp.offset)])
    m = None
    deadline = time.time() + 10
    while m is None and time.time() < deadline:
        m = c.poll(0.5)
    check(m is not None and m.error() is None, "a record at the found offset")
    check(m.timestamp()[1] >= target, f"record at {tp.offset} has time {m.timestamp()[1]} < {target}")
    if tp.offset > 0:
        c.assign([TopicPartition(TOPIC, tp.partition, tp.offset - 1)])
        prev = None
        deadline = time.time() + 10
        while prev is None and time.time() < deadline:
            prev = c.poll(0.5)
        check(prev is not None and prev.timestamp()[1] < target, "the record before is earlier than the target")
    checked += 1
c.close()
check(checked > 0, "offsets_for_times found something")
step(f"offsets_for_times({target}): {checked} partitions seeked, first record at or after the time, the one before earlier")

# DeleteRecords: the start of the busiest partition moves; reads from the beginning start there.
busiest = max(per_partition, key=lambda k: len(per_partition[k]))
cut = len(per_partition[busiest]) // 2
done = admin.delete_records([TopicPartition(TOPIC, busiest, cut)])
for tp, f in done.items():
    result = f.result(timeout=10)
    check(result.low_watermark == cut, f"low watermark {result.low_watermark}, asked {cut}")
c = Consumer({**COMMON, "group.id": "cg-deleted", "enable.auto.commit": False})
low, high = c.get_watermark_offsets(TopicPartition(TOPIC, busiest), timeout=10)
check(low == cut, f"the partition now starts at {low}, not {cut}")
c.assign([TopicPartition(TOPIC, busiest, -2)])  # OFFSET_BEGINNING
m = None
deadline = time.time() + 10
while m is None and time.time() < deadline:
    m = c.poll(0.5)
check(m is not None and m.error() is None and m.offset() == cut, f"first record read {m and m.offset()}")
c.close()
try:
    list(admin.delete_records([TopicPartition(TOPIC, busiest, high + 5)]).values())[0].result(timeout=10)
    check(False, "deleting past the high watermark must fail")
except KafkaException as e:
    check(e.args[0].name() == "OFFSET_OUT_OF_RANGE", f"error {e.args[0]}")
step(f"admin: delete_records moved partition {busiest}'s start to {cut}; reading from the beginning starts there; "
     f"past the end is OFFSET_OUT_OF_RANGE")

# Deleting the topic.
admin.delete_topics([TOPIC])[TOPIC].result(timeout=10)
md = admin.list_topics(timeout=10)
check(TOPIC not in md.topics or md.topics[TOPIC].error is not None, "topic deleted")
step("admin: deleted the topic")
print("OK", flush=True)
