"""confluent-kafka (librdkafka) against `sluice serve` with an initial rebalance delay
(Kafka's group.initial.rebalance.delay.ms): consumers started together share the first
generation of their group, so each gets its partitions with one assign callback and
none is revoked, as librdkafka's own tests 0113 and 0118 expect of a Kafka broker.

The first consumer polls alone for a while before the second subscribes: without the
delay, it would get a generation of its own and every partition, then give half up.

Usage: python3 confluent_initial_rebalance.py HOST:PORT TOPIC DELAY_MS
Prints one line per step; exits non-zero on the first failed check.
"""

import sys
import time

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from checks import check, step

BOOTSTRAP, TOPIC, DELAY = sys.argv[1], sys.argv[2], int(sys.argv[3]) / 1000
PARTITIONS = 4
COMMON = {"bootstrap.servers": BOOTSTRAP, "broker.address.family": "v4"}

admin = AdminClient(COMMON)
for f in admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)]).values():
    f.result(timeout=10)

events = []  # (consumer, "assign" | "revoke", partitions, seconds since the first subscribe)
started = time.time()


def member(name):
    c = Consumer({**COMMON, "group.id": f"{TOPIC}-group", "partition.assignment.strategy": "cooperative-sticky",
                  "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})

    def on_assign(consumer, partitions):
        events.append((name, "assign", sorted(tp.partition for tp in partitions), time.time() - started))

    def on_revoke(consumer, partitions):
        events.append((name, "revoke", sorted(tp.partition for tp in partitions), time.time() - started))

    c.subscribe([TOPIC], on_assign=on_assign, on_revoke=on_revoke)
    return c


first = member("first")
# The first consumer's join reaches the coordinator well before the second's (half a
# second: the delay the test serves with is longer).
deadline = time.time() + 0.5
while time.time() < deadline:
    first.poll(0.05)
second = member("second")
deadline = time.time() + 30
while time.time() < deadline:
    first.poll(0.1)
    second.poll(0.1)
    if len(first.assignment()) == 2 and len(second.assignment()) == 2:
        break
a1 = sorted(tp.partition for tp in first.assignment())
a2 = sorted(tp.partition for tp in second.assignment())
step(f"assignments {a1} and {a2}; callbacks {events}")
check(len(a1) == 2 and len(a2) == 2 and not set(a1) & set(a2), f"two partitions each: {a1} and {a2}")
for name in ("first", "second"):
    mine = [e for e in events if e[0] == name]
    check([e[1] for e in mine] == ["assign"], f"{name}: one assign callback and no revoke, got {mine}")
    check(mine[0][3] >= DELAY * 0.9, f"{name} assigned after {mine[0][3]:.2f} s, before the initial delay")
step(f"both consumers got their first partitions together, {min(e[3] for e in events):.2f} s after the first subscribed")

# A member joining the now stable group is a plain rebalance: no initial delay, and the
# members that were there keep their callbacks to the cooperative protocol's.
third = member("third")
deadline = time.time() + 30
while time.time() < deadline and len(third.assignment()) == 0:
    for c in (first, second, third):
        c.poll(0.05)
joined = [e for e in events if e[0] == "third" and e[1] == "assign" and e[2]]
check(joined, f"the third member got partitions: {events}")
for c in (first, second, third):
    c.close()
print("OK", flush=True)
