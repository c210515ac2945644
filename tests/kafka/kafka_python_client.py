"""kafka-python (3.x) against `sluice serve`: version negotiation, admin, idempotent
produce, group consume with committed offsets, and seeking by timestamp.

Usage: python3 kafka_python_client.py HOST:PORT TOPIC
Prints one line per step; exits non-zero on the first failed check.
"""

import sys
import time

import kafka
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

from checks import check, step

BOOTSTRAP, TOPIC = sys.argv[1], sys.argv[2]
PARTITIONS = 2
RECORDS = 20
BASE_TS = 1_710_000_000_000


check(kafka.__version__.startswith("3."), f"kafka-python 3.x needed, found {kafka.__version__}")

admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP, request_timeout_ms=10000)
admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)])
check(TOPIC in admin.list_topics(), "topic listed")
try:
    admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1)])
    check(False, "creating an existing topic must fail")
except TopicAlreadyExistsError:
    pass
step(f"admin (kafka-python {kafka.__version__}): created {TOPIC}, listed it, a second create fails with TopicAlreadyExistsError")

producer = KafkaProducer(bootstrap_servers=BOOTSTRAP, enable_idempotence=True, acks="all", linger_ms=5)
futures = [producer.send(TOPIC, key=f"k{i % 5}".encode(), value=f"v{i}".encode(), timestamp_ms=BASE_TS + i * 1000)
           for i in range(RECORDS)]
producer.flush(timeout=20)
metas = [f.get(timeout=10) for f in futures]
per_partition = {}
for m in metas:
    per_partition.setdefault(m.partition, []).append(m.offset)
for part, offs in per_partition.items():
    check(sorted(offs) == list(range(len(offs))), f"partition {part} offsets {sorted(offs)}")
# kafka-python keeps its producer id in a private field; check it where it is found.
manager = getattr(producer, "_transaction_manager", None)
pid = getattr(getattr(manager, "producer_id_and_epoch", None), "producer_id", None)
check(pid is None or pid >= 0, f"the producer got a producer id ({pid})")
producer.close()
step(f"idempotent producer (producer id {pid}): {RECORDS} records acknowledged, offsets dense per partition {sorted(per_partition)}")


def group_consumer():
    return KafkaConsumer(bootstrap_servers=BOOTSTRAP, group_id="kp-group", enable_auto_commit=False,
                         auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=500,
                         consumer_timeout_ms=3000)


c = group_consumer()
c.subscribe([TOPIC])
seen = []
deadline = time.time() + 30
while len(seen) < RECORDS and time.time() < deadline:
    for recs in c.poll(timeout_ms=500).values():
        seen.extend((r.partition, r.offset, r.value) for r in recs)
check(len(seen) == RECORDS, f"group consumer read {len(seen)} of {RECORDS}")
check(len(set(seen)) == RECORDS, "no duplicates")
c.commit()
committed = {p: c.committed(TopicPartition(TOPIC, p)) for p in range(PARTITIONS)}
ends = {p: len(per_partition.get(p, [])) for p in range(PARTITIONS)}
check(committed == ends, f"committed {committed} vs ends {ends}")
c.close()
step(f"group consumer: read {len(seen)} records, committed, committed offsets {committed} equal the ends")

c = group_consumer()
c.subscribe([TOPIC])
extra = []
deadline = time.time() + 5
while time.time() < deadline:
    for recs in c.poll(timeout_ms=500).values():
        extra.extend(recs)
c.close()
check(not extra, f"a new member re-read {len(extra)} records")
step("group consumer: a new member of the group resumes at the committed offsets and reads nothing again")

target = BASE_TS + 10_500
c = KafkaConsumer(bootstrap_servers=BOOTSTRAP, enable_auto_commit=False)
tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
found = c.offsets_for_times({tp: target for tp in tps})
c.assign(tps)
checked = 0
for tp, ot in found.items():
    if ot is None:
        continue
    check(ot.timestamp >= target, f"offsets_for_times gave time {ot.timestamp} < {target}")
    c.seek(tp, ot.offset)
    recs = []
    deadline = time.time() + 10
    while not recs and time.time() < deadline:
        recs = c.poll(timeout_ms=500, max_records=1).get(tp, [])
    check(recs and recs[0].offset == ot.offset and recs[0].timestamp == ot.timestamp, f"record at {ot}")
    checked += 1
check(checked > 0, "offsets_for_times found something")
begin = c.beginning_offsets(tps)
end = c.end_offsets(tps)
check(all(begin[tp] == 0 for tp in tps) and all(end[tp] == ends[tp.partition] for tp in tps), f"{begin} {end}")
c.close()
step(f"offsets_for_times({target}): {checked} partitions, seek + poll returns the record at the offset and time given; beginning/end offsets match")

admin.delete_topics([TOPIC])
check(TOPIC not in admin.list_topics(), "topic deleted")
admin.close()
step("admin: deleted the topic")
print("OK", flush=True)
