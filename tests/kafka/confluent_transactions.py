"""confluent-kafka (librdkafka) transactions against `sluice serve`: a transactional producer
commits one transaction, aborts another, commits a third with offsets for a group
(send_offsets_to_transaction); read_committed consumers see only what was committed,
read_uncommitted ones everything; an open transaction holds read_committed readers back
until it commits; a second producer with the same transactional id fences the first.

Usage: python3 confluent_transactions.py HOST:PORT TOPIC
Prints one line per step; exits non-zero on the first failed check. Leaves the topic with
committed values c-0..c-9, d-0..d-4, open-0..open-2, p2-0 and aborted values a-0..a-9 and
fenced values (none reach the log as committed) for the caller's kcat checks.
"""

import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from checks import check, step

BOOTSTRAP, TOPIC = sys.argv[1], sys.argv[2]
PARTITIONS = 2
COMMON = {"bootstrap.servers": BOOTSTRAP, "broker.address.family": "v4"}
GROUP = "txn-group"


admin = AdminClient(COMMON)
admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)])[TOPIC].result(timeout=10)


def producer(tid):
    p = Producer({**COMMON, "transactional.id": tid, "linger.ms": 1, "transaction.timeout.ms": 30000})
    p.init_transactions(10)
    return p


def send(p, values):
    for i, v in enumerate(values):
        p.produce(TOPIC, key=f"k{i}".encode(), value=v.encode())
    check(p.flush(10) == 0, "flush")


p = producer("txn-app")
p.begin_transaction()
send(p, [f"c-{i}" for i in range(10)])
p.commit_transaction(10)
step("producer: committed a transaction of 10 records")

p.begin_transaction()
send(p, [f"a-{i}" for i in range(10)])
p.abort_transaction(10)
step("producer: aborted a transaction of 10 records")

# A consume-transform-produce style commit: the group's offsets go with the records.
meta_consumer = Consumer({**COMMON, "group.id": GROUP, "enable.auto.commit": False})
p.begin_transaction()
send(p, [f"d-{i}" for i in range(5)])
p.send_offsets_to_transaction([TopicPartition(TOPIC, 0, 3), TopicPartition(TOPIC, 1, 7)],
                              meta_consumer.consumer_group_metadata(), 10)
p.commit_transaction(10)
step("producer: committed a transaction of 5 records with offsets for group " + GROUP)

committed = meta_consumer.committed([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)], timeout=10)
check([tp.offset for tp in committed] == [3, 7], f"group offsets after the commit: {committed}")
meta_consumer.close()
step("group offsets committed by the transaction: partition 0 at 3, partition 1 at 7")


def read_all(isolation, seconds=15):
    """Every value in the topic, read to the end of each partition."""
    c = Consumer({**COMMON, "group.id": f"reader-{isolation}-{time.time()}", "isolation.level": isolation,
                  "enable.partition.eof": True, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.assign([TopicPartition(TOPIC, i, 0) for i in range(PARTITIONS)])
    values, eof = [], set()
    deadline = time.time() + seconds
    while len(eof) < PARTITIONS and time.time() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error() is not None:
            check(m.error().code() == -191, f"consume error {m.error()}")  # _PARTITION_EOF
            eof.add(m.partition())
            continue
        values.append(m.value().decode())
    c.close()
    check(len(eof) == PARTITIONS, f"{isolation}: reached the end of {sorted(eof)} only")
    return values


committed_values = [f"c-{i}" for i in range(10)] + [f"d-{i}" for i in range(5)]
aborted_values = [f"a-{i}" for i in range(10)]
rc = read_all("read_committed")
check(sorted(rc) == sorted(committed_values), f"read_committed saw {sorted(rc)}")
step(f"read_committed consumer: {len(rc)} records, exactly the committed ones")
ru = read_all("read_uncommitted")
check(sorted(ru) == sorted(committed_values + aborted_values), f"read_uncommitted saw {sorted(ru)}")
step(f"read_uncommitted consumer: {len(ru)} records, committed and aborted")

# An open transaction holds read_committed readers back; its commit releases them.
reader = Consumer({**COMMON, "group.id": "open-reader", "isolation.level": "read_committed",
                   "auto.offset.reset": "earliest", "enable.auto.commit": False, "fetch.wait.max.ms": 200})
reader.assign([TopicPartition(TOPIC, i, 0) for i in range(PARTITIONS)])
p.begin_transaction()
send(p, [f"open-{i}" for i in range(3)])
early = []
deadline = time.time() + 3
while time.time() < deadline:
    m = reader.poll(0.2)
    if m is not None and m.error() is None:
        early.append(m.value().decode())
check(sorted(early) == sorted(committed_values), f"while the transaction is open the reader saw {sorted(early)}")
p.commit_transaction(10)
late = []
deadline = time.time() + 10
while len(late) < 3 and time.time() < deadline:
    m = reader.poll(0.2)
    if m is not None and m.error() is None:
        late.append(m.value().decode())
reader.close()
check(sorted(late) == ["open-0", "open-1", "open-2"], f"after the commit the reader saw {late}")
step("an open transaction holds a read_committed reader back; its commit releases the 3 records")

# A second producer with the same transactional id fences the first.
p2 = producer("txn-app")
p2.begin_transaction()
send(p2, ["p2-0"])
p2.commit_transaction(10)
fenced = False
try:
    p.begin_transaction()
    p.produce(TOPIC, key=b"k", value=b"fenced-0")
    p.flush(10)
    p.commit_transaction(10)
except KafkaException as e:
    fenced = e.args[0].fatal() or e.args[0].name() in ("_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH")
    step(f"the first producer is fenced: {e.args[0].name()}")
check(fenced, "the older producer must be fenced")
rc = read_all("read_committed")
check(sorted(rc) == sorted(committed_values + ["open-0", "open-1", "open-2", "p2-0"]), f"read_committed saw {sorted(rc)}")
step(f"read_committed consumer after fencing: {len(rc)} records, none from the fenced producer")
print("OK", flush=True)
