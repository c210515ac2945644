"""Every codec through `sluice serve`: records produced compressed by confluent-kafka
(librdkafka: raw snappy blocks) and by kafka-python (xerial-framed snappy), each read
back byte-identical by both clients; and topics whose compression.type names a codec
(set through CreateTopics), fed uncompressed batches and read back by both, which
then decode the batches the listener compressed.

Usage: python3 compression_clients.py HOST:PORT PREFIX EXPECTED.json
Writes what every topic must hold, in offset order, to EXPECTED.json (keys and values
in hex, a key of null for none), for kcat to be checked against by the caller. Prints
one line per step; exits non-zero on the first failed check.
"""

import json
import sys
import time

import kafka
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from checks import check, step

BOOTSTRAP, PREFIX, EXPECTED = sys.argv[1], sys.argv[2], sys.argv[3]
CODECS = ["gzip", "snappy", "lz4", "zstd"]
COMMON = {"bootstrap.servers": BOOTSTRAP, "broker.address.family": "v4"}


def records(seed):
    """Keys (some null) and values of every byte value, small and large: one value of
    200 KB compresses into several snappy and lz4 blocks."""
    out = []
    for i in range(40):
        key = None if i % 5 == 0 else f"key-{seed}-{i}".encode()
        n = (i * 97) % 3000
        value = bytes((i * 31 + j * 7 + seed) % 256 for j in range(n))
        out.append((key, value))
    out.append((b"large", (b"sluice compresses " + bytes(range(256))) * 730))
    out.append((None, b"last"))
    return out


def produce_confluent(topic, recs, codec):
    p = Producer({**COMMON, "compression.type": codec, "linger.ms": 20, "acks": "all"})
    failed = []
    for key, value in recs:
        p.produce(topic, key=key, value=value, partition=0,
                  on_delivery=lambda err, msg: failed.append(err) if err else None)
    left = p.flush(30)
    check(left == 0 and not failed, f"confluent-kafka {codec}: {left} unsent, errors {failed[:3]}")


def produce_kafka_python(topic, recs, codec):
    p = KafkaProducer(bootstrap_servers=BOOTSTRAP, compression_type=codec, linger_ms=20, acks="all",
                      max_request_size=4 << 20)
    futures = [p.send(topic, key=key, value=value, partition=0) for key, value in recs]
    p.flush(timeout=30)
    offsets = [f.get(timeout=10).offset for f in futures]
    p.close()
    check(offsets == sorted(offsets) and len(set(offsets)) == len(recs), f"kafka-python {codec}: offsets {offsets[:5]}")


def read_confluent(topic, n):
    c = Consumer({**COMMON, "group.id": f"{topic}-reader", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = []
    deadline = time.time() + 30
    while len(got) < n and time.time() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            raise KafkaException(m.error())
        got.append((m.key(), m.value()))
    c.close()
    return got


def read_kafka_python(topic, n):
    c = KafkaConsumer(bootstrap_servers=BOOTSTRAP, enable_auto_commit=False, auto_offset_reset="earliest",
                      fetch_max_bytes=8 << 20, max_partition_fetch_bytes=8 << 20)
    tp = KpTopicPartition(topic, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    got = []
    deadline = time.time() + 30
    while len(got) < n and time.time() < deadline:
        for batch in c.poll(timeout_ms=500).values():
            got.extend((m.key, m.value) for m in batch)
    c.close()
    return got


def same(got, want, what):
    check(len(got) == len(want), f"{what}: {len(got)} records of {len(want)}")
    for i, (g, w) in enumerate(zip(got, want)):
        check(g == w, f"{what}: record {i} differs (key {g[0]!r:.40} / {w[0]!r:.40}, "
                      f"value of {len(g[1] or b'')} / {len(w[1])} bytes)")


admin = AdminClient(COMMON)
expected = {}
producers = {"confluent": produce_confluent, "kafka-python": produce_kafka_python}
topics = [NewTopic(f"{PREFIX}-{who}-{codec}", num_partitions=1, replication_factor=1)
          for who in producers for codec in CODECS]
# Topics whose compression.type decides the codec of every fetched batch.
topics += [NewTopic(f"{PREFIX}-topic-{codec}", num_partitions=1, replication_factor=1,
                    config={"compression.type": codec}) for codec in CODECS]
for t, f in admin.create_topics(topics).items():
    f.result(timeout=10)
try:
    bad = NewTopic(f"{PREFIX}-bad", num_partitions=1, replication_factor=1, config={"compression.type": "brotli"})
    admin.create_topics([bad])[bad.topic].result(timeout=10)
    check(False, "compression.type=brotli must be refused")
except KafkaException as e:
    check(e.args[0].name() == "INVALID_CONFIG", f"error {e.args[0]}")
step(f"admin: created {len(topics)} topics; compression.type=brotli refused with INVALID_CONFIG")

for seed, (who, produce) in enumerate(producers.items()):
    for codec in CODECS:
        topic = f"{PREFIX}-{who}-{codec}"
        recs = records(seed * 10 + CODECS.index(codec))
        produce(topic, recs, codec)
        same(read_confluent(topic, len(recs)), recs, f"{topic} read by confluent-kafka")
        same(read_kafka_python(topic, len(recs)), recs, f"{topic} read by kafka-python")
        expected[topic] = recs
        step(f"{who} produced {len(recs)} records with {codec}; confluent-kafka and kafka-python read them back byte-identical")

for codec in CODECS:
    topic = f"{PREFIX}-topic-{codec}"
    recs = records(100 + CODECS.index(codec))
    # Uncompressed batches in: what comes out is compressed by the listener.
    produce_confluent(topic, recs, "none")
    same(read_confluent(topic, len(recs)), recs, f"{topic} read by confluent-kafka")
    same(read_kafka_python(topic, len(recs)), recs, f"{topic} read by kafka-python")
    expected[topic] = recs
    step(f"compression.type={codec}: uncompressed batches in, both clients read the fetched {codec} batches byte-identical")

with open(EXPECTED, "w") as f:
    json.dump({t: [[k.hex() if k is not None else None, v.hex()] for k, v in recs] for t, recs in expected.items()}, f)
print(f"kafka-python {kafka.__version__}", flush=True)
print("OK", flush=True)
