"""confluent-kafka (librdkafka 2.16) with `group.protocol=consumer` (KIP-848) against
sluice: two consumers split a 4-partition topic (the coordinator assigns), AdminClient
describes the group as a `consumer` group with both members, then one leaves and the
other takes its partitions over from its committed offsets; 2000 records are read, each
exactly once.

Usage: python3 confluent_consumer_protocol.py HOST:PORT TOPIC
Prints one line per step; exits non-zero on the first failed check.
"""

import sys
import time

from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupType, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from checks import check, step

BOOTSTRAP, TOPIC = sys.argv[1], sys.argv[2]
GROUP = f"{TOPIC}-group"
PARTITIONS = 4
RECORDS = 2000
COMMON = {"bootstrap.servers": BOOTSTRAP, "broker.address.family": "v4"}

admin = AdminClient(COMMON)
admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)])[TOPIC].result(timeout=10)


def consumer(name):
    events = []
    c = Consumer({**COMMON, "group.id": GROUP, "group.protocol": "consumer", "client.id": name,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.subscribe([TOPIC], on_assign=lambda _c, ps: events.append(("assign", [p.partition for p in ps])),
                on_revoke=lambda _c, ps: events.append(("revoke", [p.partition for p in ps])))
    return c, events


def owned(c):
    return {p.partition for p in c.assignment()}


first, first_events = consumer("first")
deadline = time.time() + 30
while len(owned(first)) < PARTITIONS and time.time() < deadline:
    check(first.poll(0.2) is None, "a record before any was produced")
check(owned(first) == set(range(PARTITIONS)), f"the first member alone owns {owned(first)}")
step(f"the first member alone was given every partition: {sorted(owned(first))}")
second, second_events = consumer("second")


# Both join; the coordinator splits the partitions between them (the first revokes two
# before the second is given them).
deadline = time.time() + 30
while time.time() < deadline:
    for c in (first, second):
        m = c.poll(0.2)
        check(m is None, f"a record before any was produced: {m}")
    if len(owned(first)) == 2 and len(owned(second)) == 2:
        break
a1, a2 = owned(first), owned(second)
check(len(a1) == 2 and len(a2) == 2 and not (a1 & a2), f"assignments {a1} and {a2}")
check(("revoke", sorted(a2)) in [(e, sorted(ps)) for e, ps in first_events], f"first's callbacks {first_events}")
step(f"two members split {PARTITIONS} partitions: {sorted(a1)} and {sorted(a2)} "
     f"(first's callbacks {first_events})")

groups = admin.describe_consumer_groups([GROUP])[GROUP].result(timeout=10)
check(groups.type == ConsumerGroupType.CONSUMER, f"group type {groups.type}")
check(groups.state == ConsumerGroupState.STABLE, f"group state {groups.state}")
members = {m.client_id: {tp.partition for tp in m.assignment.topic_partitions} for m in groups.members}
check(members == {"first": a1, "second": a2}, f"described members {members}")
step(f"describe_consumer_groups: type {groups.type}, state {groups.state}, members {members}")

p = Producer({**COMMON, "acks": "all", "linger.ms": 5})
for i in range(RECORDS):
    p.produce(TOPIC, value=f"v{i}".encode(), partition=i % PARTITIONS)
check(p.flush(20) == 0, "flush left messages")
step(f"produced {RECORDS} records over {PARTITIONS} partitions")

reads = {}
stale = []


def take(c, who):
    m = c.poll(0.1)
    if m is None:
        return None
    check(m.error() is None, f"{who}: consume error {m.error()}")
    key = (m.partition(), m.offset())
    reads[key] = reads.get(key, 0) + 1
    # Committed before the next record is taken, so whoever reads this partition next
    # starts after it. A commit racing the heartbeat that moves the member to a new epoch
    # gets STALE_MEMBER_EPOCH, from Kafka as from sluice, and librdkafka hands a manual
    # commit's error back: retry once the heartbeat has given the new epoch.
    for attempt in range(50):
        try:
            c.commit(message=m, asynchronous=False)
            return m
        except KafkaException as e:
            check(e.args[0].code() == KafkaError.STALE_MEMBER_EPOCH, f"{who}: commit failed: {e}")
            stale.append(who)
            time.sleep(0.05)
    check(False, f"{who}: commit still stale after 50 attempts")


# Both read until the second has read 300 records; then it leaves.
second_read = 0
deadline = time.time() + 60
while second_read < 300 and time.time() < deadline:
    take(first, "first")
    if take(second, "second") is not None:
        second_read += 1
check(second_read == 300, f"the second member read {second_read} records")
committed = {tp.partition: tp.offset for tp in second.committed([tp for tp in second.assignment()], timeout=10)}
second.close()
step(f"the second member read {second_read} records, committed {committed}, and left")

deadline = time.time() + 60
while len(reads) < RECORDS and time.time() < deadline:
    take(first, "first")
check(owned(first) == set(range(PARTITIONS)), f"the first member took every partition: {owned(first)}")
twice = sorted(k for k, n in reads.items() if n > 1)
check(len(reads) == RECORDS, f"read {len(reads)} distinct records of {RECORDS}")
check(not twice, f"{len(twice)} records read twice, the first {twice[:5]}")
for part, offset in committed.items():
    check(all((part, o) in reads for o in range(offset)), f"partition {part} below {offset} read")
step(f"the first member took partitions {sorted(a2)} over at the committed offsets; "
     f"{RECORDS} records read once each (callbacks {first_events}; {len(stale)} commits retried "
     f"after STALE_MEMBER_EPOCH)")
first.close()

groups = admin.describe_consumer_groups([GROUP])[GROUP].result(timeout=10)
check(groups.state == ConsumerGroupState.EMPTY, f"state after both left: {groups.state}")
step(f"both left: the group is {groups.state}")
print("OK", flush=True)
