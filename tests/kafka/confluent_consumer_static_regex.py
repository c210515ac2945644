"""confluent-kafka (librdkafka 2.16) with `group.protocol=consumer` (KIP-848) against
sluice: a subscription by regular expression (resolved by the coordinator, which picks up
a matching topic created later and leaves others out), the `range` server assignor, and a
static member (`group.instance.id`) that closes and comes back under a new member id to
the same partitions, its place kept meanwhile.

Usage: python3 confluent_consumer_static_regex.py HOST:PORT PREFIX
Prints one line per step; exits non-zero on the first failed check.
"""

import sys
import time

from confluent_kafka import Consumer, ConsumerGroupType
from confluent_kafka.admin import AdminClient, NewTopic

from checks import check, step

BOOTSTRAP, PREFIX = sys.argv[1], sys.argv[2]
GROUP = f"{PREFIX}-group"
COMMON = {"bootstrap.servers": BOOTSTRAP, "broker.address.family": "v4"}

admin = AdminClient(COMMON)


def create(name, partitions):
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(timeout=10)


create(f"{PREFIX}-a", 2)
create(f"{PREFIX}-b", 2)
create(f"other-{PREFIX}", 1)


def consumer():
    c = Consumer({**COMMON, "group.id": GROUP, "group.protocol": "consumer", "group.instance.id": "instance-1",
                  "group.remote.assignor": "range", "client.id": "static", "enable.auto.commit": False})
    c.subscribe([f"^{PREFIX}-.*"])
    return c


def owned(c):
    return sorted((p.topic, p.partition) for p in c.assignment())


def poll_until(c, want, what):
    deadline = time.time() + 30
    while owned(c) != want and time.time() < deadline:
        m = c.poll(0.2)
        check(m is None or m.error() is None, f"consume error {m and m.error()}")
    check(owned(c) == want, f"{what}: owns {owned(c)}, expected {want}")


first = consumer()
want = [(f"{PREFIX}-a", 0), (f"{PREFIX}-a", 1), (f"{PREFIX}-b", 0), (f"{PREFIX}-b", 1)]
poll_until(first, want, "the regex subscription")
step(f"subscribed by regex ^{PREFIX}-.*: owns {owned(first)} (not other-{PREFIX})")

create(f"{PREFIX}-c", 1)
want = sorted(want + [(f"{PREFIX}-c", 0)])
poll_until(first, want, "a matching topic created later")
step(f"a matching topic created later is assigned: owns {owned(first)}")

described = admin.describe_consumer_groups([GROUP])[GROUP].result(timeout=10)
check(described.type == ConsumerGroupType.CONSUMER, f"type {described.type}")
check(described.partition_assignor == "range", f"assignor {described.partition_assignor}")
check([m.group_instance_id for m in described.members] == ["instance-1"], f"members {described.members}")
old_member = described.members[0].member_id
step(f"described: assignor {described.partition_assignor}, static member {old_member}")

# A static member's close leaves with epoch -2: its place and partitions are kept.
first.close()
described = admin.describe_consumer_groups([GROUP])[GROUP].result(timeout=10)
kept = sorted((tp.topic, tp.partition) for m in described.members for tp in m.assignment.topic_partitions)
check(len(described.members) == 1 and kept == want, f"after close: members {described.members}")
step(f"closed: the static member's place is kept with {kept}")

second = consumer()
poll_until(second, want, "the static member back under a new member id")
described = admin.describe_consumer_groups([GROUP])[GROUP].result(timeout=10)
check(len(described.members) == 1, f"members {described.members}")
check(described.members[0].member_id != old_member, "a new member id")
check(described.members[0].group_instance_id == "instance-1", "the same instance")
step(f"back as {described.members[0].member_id} with the same partitions {owned(second)}")
second.close()
print("OK", flush=True)
