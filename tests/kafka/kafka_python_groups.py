"""kafka-python (3.x) against `sluice serve`: consumer groups as Kafka runs them.

- Two members with an assignor of this script's own (a name no broker knows) in a group
  whose id no topic could have (`roundrobin,range`): the leader's client computes the
  assignment, each member gets its share, every record is read once.
- Commits with metadata and leader epoch read back; OffsetFetch of several groups at once.
- DescribeGroups (client ids, hosts, metadata, assignments), ListGroups filters,
  OffsetDelete (refused for a subscribed topic), DeleteGroups (refused with members).
- Group ids `a/b`, `..` and unicode.
- Static members: one that closes is kept, then removed by its instance id alone.

Usage: python3 kafka_python_groups.py HOST:PORT TOPIC [after-restart]
With `after-restart`, only checks that what the first run committed is still there.
Prints one line per step; exits non-zero on the first failed check.
"""

import collections
import logging
import sys
import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import MemberToRemove, NewTopic
from kafka.coordinator.assignors.abstract import (
    AbstractPartitionAssignor,
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)
from kafka.structs import OffsetAndMetadata, TopicPartition
import kafka.errors as Errors

from checks import check, step

BOOTSTRAP, TOPIC = sys.argv[1], sys.argv[2]
AFTER_RESTART = len(sys.argv) > 3 and sys.argv[3] == "after-restart"
OTHER = TOPIC + "-other"
PARTITIONS = 4
RECORDS = 40
# Group ids no topic could have; each run's own (several runs may share a server).
GROUP = f"roundrobin,range {TOPIC}"
STANDALONE = f"standalone ✓ {TOPIC}"
ODD_IDS = ["a/b", "..", "grüppe-✓"]

logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP)


def committed(group):
    """The group's committed offsets of this run's topics."""
    offsets = admin.list_group_offsets({group: None})[group]
    return {tp: o for tp, o in offsets.items() if tp.topic in (TOPIC, OTHER)}


if AFTER_RESTART:
    got = committed(STANDALONE)
    want = {TopicPartition(TOPIC, p): (7 + p, f"kept {p} ✓", 5) for p in range(PARTITIONS)}
    check({tp: (o.offset, o.metadata, o.leader_epoch) for tp, o in got.items()} == want,
          f"after the restart {STANDALONE!r} has {got}")
    check(sum(o.offset for o in committed("a/b").values()) == RECORDS, f"after the restart 'a/b' has {committed('a/b')}")
    step("commit metadata and leader epochs read back after the restart")
    print("OK", flush=True)
    sys.exit(0)

admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1),
                     NewTopic(OTHER, num_partitions=1, replication_factor=1)])
producer = KafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all")
for i in range(RECORDS):
    producer.send(TOPIC, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % PARTITIONS)
producer.flush(timeout=20)
producer.close()
step(f"produced {RECORDS} records into {PARTITIONS} partitions")


class Reverse(AbstractPartitionAssignor):
    """Partition p goes to the member (len - 1 - p) % len in member id order: unlike range
    and roundrobin, the last member gets partition 0."""
    name = "sluice-test-reverse"
    version = 0
    calls = []

    @classmethod
    def assign(cls, cluster, members):
        cls.calls.append(sorted((m.member_id, tuple(m.metadata.topics)) for m in members))
        ids = sorted(m.member_id for m in members)
        shares = collections.defaultdict(list)
        for p in sorted(cluster.partitions_for_topic(TOPIC) or []):
            shares[ids[(len(ids) - 1 - p) % len(ids)]].append(p)
        return {m: ConsumerProtocolAssignment(0, [(TOPIC, shares[m])], b"") for m in ids}

    @classmethod
    def metadata(cls, topics):
        return ConsumerProtocolSubscription(0, list(topics), b"")

    @classmethod
    def on_assignment(cls, assignment, generation):
        pass


def member(group, client_id, **kw):
    # Auto-commit on, with an interval no run reaches: kafka-python then commits its
    # positions only before it rejoins (giving its partitions up) and when it closes, so
    # the next owner of a partition starts where the last one stopped.
    c = KafkaConsumer(bootstrap_servers=BOOTSTRAP, group_id=group, client_id=client_id, enable_auto_commit=True,
                      auto_commit_interval_ms=600_000, auto_offset_reset="earliest", session_timeout_ms=6000,
                      heartbeat_interval_ms=200, **kw)
    # The topic's metadata first: a leader that assigned before it had it would hand out
    # nothing until its next metadata refresh (joins complete at once here, as with
    # Kafka's group.initial.rebalance.delay.ms=0 of its shipped server.properties).
    check(c.partitions_for_topic(TOPIC) == set(range(PARTITIONS)), "topic metadata")
    c.subscribe([TOPIC])
    return c


def member_id(c):
    return c._coordinator.group_metadata().member_id


def settle(group, consumers, reads, seconds=30):
    """Polls until the group is stable with these members, each with a share, and every
    partition assigned exactly once; counts what is read."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        for c in consumers:
            for recs in c.poll(timeout_ms=50).values():
                for r in recs:
                    reads[(r.partition, r.offset)] += 1
        shares = [{tp.partition for tp in c.assignment()} for c in consumers]
        if (all(shares) and sum(len(s) for s in shares) == PARTITIONS
                and set().union(*shares) == set(range(PARTITIONS))):
            d = admin.describe_groups([group])[group]
            if d["group_state"] == "Stable" and len(d["members"]) == len(consumers):
                return shares
    d = admin.describe_groups([group])[group]
    check(False, f"no stable assignment in {seconds} s: {[c.assignment() for c in consumers]}; {d}")


# 1. An assignor of our own: the leader's client assigns, each member gets its share.
reads = collections.Counter()
a, b = member(GROUP, "kp-a", partition_assignment_strategy=[Reverse]), member(GROUP, "kp-b", partition_assignment_strategy=[Reverse])
shares = settle(GROUP, [a, b], reads)
ids = sorted([member_id(a), member_id(b)])
want = {m: {p for p in range(PARTITIONS) if ids[(len(ids) - 1 - p) % 2] == m} for m in ids}
check({member_id(a): shares[0], member_id(b): shares[1]} == want, f"shares {shares} for {ids}, want {want}")
check(any(call == [(m, (TOPIC,)) for m in ids] for call in Reverse.calls),
      f"the leader assigned with both members' subscriptions: {Reverse.calls}")
deadline = time.time() + 30
while sum(reads.values()) < RECORDS and time.time() < deadline:
    for c in (a, b):
        for recs in c.poll(timeout_ms=50).values():
            for r in recs:
                reads[(r.partition, r.offset)] += 1
check(len(reads) == RECORDS and all(n == 1 for n in reads.values()), f"read {dict(reads)}")
step(f"assignor {Reverse.name!r} (the client's own) gave {member_id(a)} {sorted(shares[0])} and "
     f"{member_id(b)} {sorted(shares[1])}; every record read once")

# 2. Commits keep metadata and leader epoch; OffsetFetch of several groups at once.
for c in (a, b):
    c.commit({tp: OffsetAndMetadata(c.position(tp), f"meta {tp.partition} ✓", 3) for tp in c.assignment()})
admin.alter_group_offsets(STANDALONE, {TopicPartition(TOPIC, p): OffsetAndMetadata(7 + p, f"kept {p} ✓", 5)
                                       for p in range(PARTITIONS)})
both = admin.list_group_offsets({GROUP: None, STANDALONE: None})
check(set(both) == {GROUP, STANDALONE}, f"groups {list(both)}")
check({tp: (o.offset, o.metadata, o.leader_epoch) for tp, o in both[GROUP].items()}
      == {TopicPartition(TOPIC, p): (RECORDS // PARTITIONS, f"meta {p} ✓", 3) for p in range(PARTITIONS)},
      f"{GROUP!r} committed {both[GROUP]}")
check({tp: (o.offset, o.metadata, o.leader_epoch) for tp, o in both[STANDALONE].items()}
      == {TopicPartition(TOPIC, p): (7 + p, f"kept {p} ✓", 5) for p in range(PARTITIONS)},
      f"{STANDALONE!r} committed {both[STANDALONE]}")
step("commits read back with their metadata and leader epochs, two groups in one OffsetFetch")

# 3. DescribeGroups and ListGroups.
d = admin.describe_groups([GROUP])[GROUP]
check((d["group_state"], d["protocol_type"], d["protocol_data"]) == ("Stable", "consumer", Reverse.name), f"{d}")
described = {m["member_id"]: m for m in d["members"]}
check(set(described) == set(ids), f"members {list(described)}")
for c, client_id, share in ((a, "kp-a", shares[0]), (b, "kp-b", shares[1])):
    m = described[member_id(c)]
    check((m["client_id"], m["client_host"]) == (client_id, "/127.0.0.1"), f"member {m}")
    check(m["member_metadata"]["topics"] == [TOPIC], f"metadata {m['member_metadata']}")
    parts = {p for t in m["member_assignment"]["assigned_partitions"] for p in t["partitions"]}
    check(parts == share, f"assignment {m['member_assignment']} against {share}")
stable = {g["group_id"]: g for g in admin.list_groups(states_filter=["Stable"])}
check(GROUP in stable and stable[GROUP]["group_type"] == "classic", f"stable groups {stable}")
check(STANDALONE not in stable, f"{STANDALONE!r} is empty, not stable: {stable}")
empty = {g["group_id"] for g in admin.list_groups(states_filter=["Empty"])}
check(STANDALONE in empty and GROUP not in empty, f"empty groups {empty}")
check(admin.list_groups(types_filter=["consumer"]) == [], "no KIP-848 groups")
step("DescribeGroups shows client ids, /127.0.0.1, metadata and assignments; ListGroups filters")

# 4. OffsetDelete only for topics the members do not consume; DeleteGroups only when empty.
a.commit({TopicPartition(OTHER, 0): OffsetAndMetadata(0, "other", -1)})
deleted = admin.delete_group_offsets(GROUP, [TopicPartition(TOPIC, 0), TopicPartition(OTHER, 0)])
check(deleted == {TopicPartition(TOPIC, 0): Errors.GroupSubscribedToTopicError,
                  TopicPartition(OTHER, 0): Errors.NoError}, f"OffsetDelete {deleted}")
check(TopicPartition(OTHER, 0) not in committed(GROUP), "the other topic's offset is gone")
check(admin.delete_groups([GROUP]) == {GROUP: "NonEmptyGroupError"}, "a group with members is not deleted")
a.close()
b.close()
check(admin.describe_groups([GROUP])[GROUP]["group_state"] == "Empty", "both members left")
check(admin.delete_groups([GROUP]) == {GROUP: "OK"}, "the empty group is deleted")
check(committed(GROUP) == {}, f"its offsets went with it: {committed(GROUP)}")
check(admin.delete_groups([GROUP]) == {GROUP: "GroupIdNotFoundError"}, "a deleted group is not found")
step("OffsetDelete refused for a subscribed topic; DeleteGroups refused with members, then done")

# 5. Group ids are any string.
for gid in ODD_IDS:
    reads = collections.Counter()
    c = member(gid, "kp-odd")
    settle(gid, [c], reads)
    deadline = time.time() + 20
    while sum(reads.values()) < RECORDS and time.time() < deadline:
        for recs in c.poll(timeout_ms=50).values():
            for r in recs:
                reads[(r.partition, r.offset)] += 1
    check(len(reads) == RECORDS, f"group {gid!r} read {len(reads)} records")
    c.commit()
    c.close()
    check(sum(o.offset for o in committed(gid).values()) == RECORDS, f"group {gid!r} committed {committed(gid)}")
step(f"groups {ODD_IDS} joined, read and committed")

# 6. Static members: one that closes is kept (no LeaveGroup), then removed by instance id.
static = f"kp-static {TOPIC}"
s1 = member(static, "kp-s1", group_instance_id="instance-1")
s2 = member(static, "kp-s2", group_instance_id="instance-2")
settle(static, [s1, s2], collections.Counter())
s1.close()
time.sleep(1)
d = admin.describe_groups([static])[static]
check(sorted(m["group_instance_id"] for m in d["members"]) == ["instance-1", "instance-2"],
      f"a static member that closed is kept until its session ends: {d}")
removed = admin.remove_group_members(static, [MemberToRemove(group_instance_id="instance-1"),
                                              MemberToRemove(group_instance_id="instance-9")])
check({k: v for k, v in removed.items()} == {"instance-1": Errors.NoError, "instance-9": Errors.UnknownMemberIdError},
      f"LeaveGroup by instance id: {removed}")
shares = settle(static, [s2], collections.Counter())
check(shares == [set(range(PARTITIONS))], f"the remaining member took every partition: {shares}")
d = admin.describe_groups([static])[static]
check([m["group_instance_id"] for m in d["members"]] == ["instance-2"], f"{d}")
s2.close()
step("a static member that closed stayed, then an administrator removed it by instance id")

admin.close()
print("OK", flush=True)
