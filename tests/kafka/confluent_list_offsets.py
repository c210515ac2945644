"""confluent-kafka (librdkafka) ListOffsets at both isolation levels against `sluice serve`:
while a transaction is open, a read_committed consumer is told the last stable offset
(the open transaction's first offset) as the partition's end, and finds no offset for a
time inside the transaction; a read_uncommitted one is told the high watermark and finds
it. Once the transaction commits, both see the whole log.

Usage: python3 confluent_list_offsets.py HOST:PORT TOPIC
Prints one line per step; exits non-zero on the first failed check.
"""

import sys

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from checks import check, step

BOOTSTRAP, TOPIC = sys.argv[1], sys.argv[2]
COMMON = {"bootstrap.servers": BOOTSTRAP, "broker.address.family": "v4"}
BASE_TS = 1_720_000_000_000

admin = AdminClient(COMMON)
admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1)])[TOPIC].result(timeout=10)

plain = Producer({**COMMON, "linger.ms": 1})
for i in range(5):
    plain.produce(TOPIC, value=f"plain-{i}".encode(), partition=0, timestamp=BASE_TS + i)
check(plain.flush(10) == 0, "flush")

txn = Producer({**COMMON, "transactional.id": "list-offsets-app", "linger.ms": 1})
txn.init_transactions(10)
txn.begin_transaction()
for i in range(3):
    txn.produce(TOPIC, value=f"open-{i}".encode(), partition=0, timestamp=BASE_TS + 100 + i)
check(txn.flush(10) == 0, "flush")
step("5 plain records, then a transaction of 3 left open (in the log, not committed)")


def consumer(isolation):
    return Consumer({**COMMON, "group.id": f"lo-{isolation}", "isolation.level": isolation})


tp = TopicPartition(TOPIC, 0)
committed, uncommitted = consumer("read_committed"), consumer("read_uncommitted")
lo, hi = committed.get_watermark_offsets(tp, timeout=10, cached=False)
check((lo, hi) == (0, 5), f"read_committed watermarks {(lo, hi)}: the last stable offset is 5")
lo, hi = uncommitted.get_watermark_offsets(tp, timeout=10, cached=False)
check((lo, hi) == (0, 8), f"read_uncommitted watermarks {(lo, hi)}: the high watermark is 8")
step("open transaction: read_committed is told 5 (the last stable offset), read_uncommitted 8")

# A time inside the open transaction: only a read_uncommitted reader may be sent there.
at = [TopicPartition(TOPIC, 0, BASE_TS + 101)]
found = committed.offsets_for_times(at, timeout=10)[0].offset
check(found < 0, f"read_committed offsets_for_times inside the open transaction: {found}")
found = uncommitted.offsets_for_times(at, timeout=10)[0].offset
check(found == 6, f"read_uncommitted offsets_for_times: {found}")
found = committed.offsets_for_times([TopicPartition(TOPIC, 0, BASE_TS + 2)], timeout=10)[0].offset
check(found == 2, f"read_committed offsets_for_times before the transaction: {found}")
step("offsets_for_times inside the open transaction: none for read_committed, 6 for read_uncommitted")

txn.commit_transaction(10)
for c, name in [(committed, "read_committed"), (uncommitted, "read_uncommitted")]:
    lo, hi = c.get_watermark_offsets(tp, timeout=10, cached=False)
    check((lo, hi) == (0, 9), f"{name} after the commit: {(lo, hi)} (3 records and the marker past 5)")
step("after the commit both are told 9 (the marker included)")
committed.close()
uncommitted.close()
print("OK", flush=True)
