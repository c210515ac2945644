"""confluent-kafka (librdkafka) against `sluice serve`: static membership (KIP-345) and
cooperative-sticky rebalancing (KIP-429).

- Static members: one closes (static members send no LeaveGroup) and comes back under
  its `group.instance.id` within the session timeout: it gets its partitions back and the
  other member sees no rebalance; DescribeGroups shows the new member id with the same
  instance id, the client ids and `/127.0.0.1`. A second client under a held instance id
  takes its place, and the first is fenced (a fatal FENCED_INSTANCE_ID).
- Cooperative-sticky: a second member joins a group whose first member keeps reading the
  partitions it keeps; only the moving partitions are revoked (after their positions are
  committed) and then assigned to the newcomer; every record is read exactly once.

Usage: python3 confluent_groups.py HOST:PORT TOPIC
Prints one line per step; exits non-zero on the first failed check.
"""

import collections
import sys
import time

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from checks import check, step

BOOTSTRAP, TOPIC = sys.argv[1], sys.argv[2]
STATIC_TOPIC, COOP_TOPIC = TOPIC + "-static", TOPIC + "-coop"
COMMON = {"bootstrap.servers": BOOTSTRAP, "broker.address.family": "v4"}

admin = AdminClient(COMMON)
for f in admin.create_topics([NewTopic(STATIC_TOPIC, num_partitions=4, replication_factor=1),
                              NewTopic(COOP_TOPIC, num_partitions=6, replication_factor=1)]).values():
    f.result(timeout=10)
p = Producer({**COMMON, "acks": "all", "linger.ms": 5})
COOP_RECORDS = 3000
for i in range(COOP_RECORDS):
    p.produce(COOP_TOPIC, value=f"c{i}".encode(), partition=i % 6)
for i in range(40):
    p.produce(STATIC_TOPIC, value=f"s{i}".encode(), partition=i % 4)
check(p.flush(20) == 0, "flush left messages")
step(f"produced {COOP_RECORDS} records into {COOP_TOPIC}, 40 into {STATIC_TOPIC}")


class Member:
    """A consumer that notes its rebalance callbacks and errors (from `error_cb` and poll)."""

    def __init__(self, name, group, topic, **conf):
        self.name, self.events, self.errors = name, [], []
        self.c = Consumer({**COMMON, "group.id": group, "client.id": name, "enable.auto.commit": False,
                           "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                           "heartbeat.interval.ms": 300, "error_cb": self.errors.append, **conf})
        self.c.subscribe([topic], on_assign=self.on_assign, on_revoke=self.on_revoke)

    def on_assign(self, consumer, partitions):
        self.events.append(("assign", sorted(tp.partition for tp in partitions)))

    def on_revoke(self, consumer, partitions):
        # Give the partitions up with their positions committed (those read from).
        positions = [tp for tp in consumer.position(partitions) if tp.offset >= 0]
        if positions:
            consumer.commit(offsets=positions, asynchronous=False)
        self.events.append(("revoke", sorted(tp.partition for tp in partitions)))

    def owned(self):
        return {tp.partition for tp in self.c.assignment()}


def poll_until(members, done, seconds, on_message=None):
    deadline = time.time() + seconds
    while time.time() < deadline:
        for m in members:
            msg = m.c.poll(0.05)
            if msg is not None and msg.error() is not None:
                m.errors.append(msg.error())
            elif msg is not None and on_message:
                on_message(m, msg)
        if done():
            return
    check(False, f"timed out: {[(m.name, m.owned(), m.events) for m in members]}")


def describe(group):
    return admin.describe_consumer_groups([group])[group].result(timeout=10)


# Static membership.
group = "ck-static"
s1 = Member("static-1", group, STATIC_TOPIC, **{"group.instance.id": "instance-1"})
s2 = Member("static-2", group, STATIC_TOPIC, **{"group.instance.id": "instance-2"})
poll_until([s1, s2], lambda: len(s1.owned()) + len(s2.owned()) == 4 and s1.owned() and s2.owned(), 30)
first_share, second_share = s1.owned(), s2.owned()
d = describe(group)
members = {m.group_instance_id: m for m in d.members}
check(set(members) == {"instance-1", "instance-2"}, f"instances {list(members)}")
check(all(m.host == "/127.0.0.1" for m in d.members), f"hosts {[m.host for m in d.members]}")
check({m.client_id for m in d.members} == {"static-1", "static-2"}, f"client ids {[m.client_id for m in d.members]}")
old_id = members["instance-1"].member_id
s2_events = len(s2.events)
step(f"two static members: {sorted(first_share)} and {sorted(second_share)}")

s1.c.close()  # a static member sends no LeaveGroup
back = Member("static-1-again", group, STATIC_TOPIC, **{"group.instance.id": "instance-1"})
poll_until([back, s2], lambda: back.owned(), 20)
until = time.time() + 3
poll_until([back, s2], lambda: time.time() >= until, 10)  # ten heartbeats more
check(back.owned() == first_share, f"back with {back.owned()}, had {first_share}")
check(s2.owned() == second_share and len(s2.events) == s2_events,
      f"the other member saw no rebalance: {s2.events[s2_events:]}, owns {s2.owned()}")
d = describe(group)
members = {m.group_instance_id: m for m in d.members}
check(len(d.members) == 2 and members["instance-1"].member_id != old_id, f"member ids {members}")
step(f"instance-1 came back as {members['instance-1'].member_id} with {sorted(back.owned())}; no rebalance")

# A second client under the held instance id replaces it; the first is fenced.
intruder = Member("static-1-third", group, STATIC_TOPIC, **{"group.instance.id": "instance-1"})
def is_fatal(e):
    return e.fatal() or e.code() == KafkaError._FATAL


poll_until([intruder, back, s2], lambda: intruder.owned() and any(is_fatal(e) for e in back.errors), 30)
fenced = [e for e in back.errors if is_fatal(e)]
check("fenced" in str(fenced[0]).lower(), f"fatal error {fenced[0]}")
check(intruder.owned() == first_share and s2.owned() == second_share, f"{intruder.owned()} {s2.owned()}")
step(f"a third client under instance-1 took its place; the one before was fenced: {fenced[0]}")
for m in (intruder, s2):
    m.c.close()
back.c.close()

# Cooperative-sticky: the first member keeps what it keeps while the second joins.
group = "ck-coop"
reads = collections.Counter()
read_by = collections.defaultdict(list)  # member -> [(partition, offset, phase)]
phase = ["alone"]


def note(m, msg):
    reads[(msg.partition(), msg.offset())] += 1
    read_by[m.name].append((msg.partition(), msg.offset(), phase[0]))


COOP = {"partition.assignment.strategy": "cooperative-sticky", "max.partition.fetch.bytes": 1024,
        "fetch.max.bytes": 100000, "message.max.bytes": 100000}
x = Member("coop-1", group, COOP_TOPIC, **COOP)
poll_until([x], lambda: len(reads) >= COOP_RECORDS // 4 and len(x.owned()) == 6, 30, note)
step(f"coop-1 read {len(reads)} records alone from {sorted(x.owned())}")
phase[0] = "joined"
y = Member("coop-2", group, COOP_TOPIC, **COOP)


def slow(m, msg):
    note(m, msg)
    time.sleep(0.001)  # a slow consumer: the hand-over happens while records remain


poll_until([x, y], lambda: len(reads) == COOP_RECORDS and y.owned() and len(x.owned() | y.owned()) == 6, 90, slow)
twice = [k for k, n in reads.items() if n > 1]
check(not twice, f"{len(twice)} records read twice, e.g. {twice[:5]}; events {x.events} {y.events}")
check(not (x.owned() & y.owned()), f"assignments overlap: {x.owned()} {y.owned()}")
revoked = [parts for kind, parts in x.events if kind == "revoke" and parts]
check(revoked and all(0 < len(r) < 6 for r in revoked), f"only moving partitions were revoked: {x.events}")
check(set().union(*revoked) == y.owned(), f"revoked {revoked}, the newcomer owns {y.owned()}")
kept = x.owned()
# Every kept partition coop-1 had not finished when coop-2 joined, it read on from.
last_alone = {p: max((o for q, o, ph in read_by["coop-1"] if q == p and ph == "alone"), default=-1) for p in kept}
unfinished = {p for p, o in last_alone.items() if o < COOP_RECORDS // 6 - 1}
after = {p for p, _, ph in read_by["coop-1"] if ph == "joined" and p in kept}
check(unfinished and unfinished <= after,
      f"coop-1 kept reading {sorted(unfinished)} after coop-2 joined (read from {sorted(after)})")
step(f"coop-2 joined: coop-1 gave up only {revoked}, kept {sorted(kept)} and read on from {sorted(after)}; "
     "every record read once")
x.c.close()
y.c.close()
print("OK", flush=True)
