"""Every part of a record kept: confluent-kafka produces records with headers (a repeated
name, an empty value, a null value), null keys, null values (tombstones) and empty ones,
uncompressed and with each codec; confluent-kafka, kafka-python and kcat read them back
the same.

Usage: python3 record_fidelity.py HOST:PORT TOPIC
Prints one line per step; exits non-zero on the first failed check.
"""

import json
import subprocess
import sys

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition

from checks import check, step

BOOTSTRAP, TOPIC = sys.argv[1], sys.argv[2]
COMMON = {"bootstrap.servers": BOOTSTRAP, "broker.address.family": "v4"}

# (key, value, headers): what goes in is what must come out.
RECORDS = [
    (b"k1", b"v1", [("trace", b"abc"), ("span", b"0123")]),
    (None, None, [("n", None), ("e", b"")]),
    (b"k3", None, []),
    (b"", b"", [("trace", b"x"), ("trace", b"y")]),
    (b"k5", "\u00e9t\u00e9".encode(), [("\u00fcber", "\u00e7a".encode())]),
    # Compressible, so that every codec shrinks the batch and the producer keeps it.
    (b"big", b"abc" * 1000, [("h", b"v" * 100)]),
]

def round_trip(topic, codec):
    admin = AdminClient(COMMON)
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(timeout=10)

    producer = Producer({**COMMON, "enable.idempotence": True, "linger.ms": 5, "compression.type": codec})
    for key, value, headers in RECORDS:
        producer.produce(topic, key=key, value=value, headers=headers)
    check(producer.flush(10) == 0, "every record delivered")
    step(f"{codec}: confluent-kafka produced {len(RECORDS)} records with headers, null keys and null values")


    def confluent_read():
        c = Consumer({**COMMON, "group.id": "fidelity-ck", "enable.auto.commit": False})
        c.assign([TopicPartition(topic, 0, 0)])
        got = []
        while len(got) < len(RECORDS):
            m = c.poll(10)
            check(m is not None, f"confluent-kafka read {len(got)} of {len(RECORDS)}")
            check(m.error() is None, f"confluent-kafka: {m.error()}")
            got.append((m.key(), m.value(), list(m.headers() or [])))
        c.close()
        return got


    def kafka_python_read():
        c = KafkaConsumer(bootstrap_servers=BOOTSTRAP, enable_auto_commit=False, consumer_timeout_ms=10000)
        tp = KpTopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        got = []
        for m in c:
            got.append((m.key, m.value, [(k, v) for k, v in m.headers]))
            if len(got) == len(RECORDS):
                break
        c.close()
        return got


    def kcat_read():
        out = subprocess.run(
            ["kcat", "-b", BOOTSTRAP, "-X", "broker.address.family=v4", "-C", "-t", topic, "-o", "beginning",
             "-e", "-J"],
            capture_output=True, timeout=30, check=True,
        ).stdout.decode()
        got = []
        for line in out.splitlines():
            m = json.loads(line)
            enc = lambda s: None if s is None else s.encode()
            h = m.get("headers") or []
            got.append((enc(m["key"]), enc(m["payload"]), [(h[i], enc(h[i + 1])) for i in range(0, len(h), 2)]))
        return got


    for name, read in [("confluent-kafka", confluent_read), ("kafka-python", kafka_python_read), ("kcat", kcat_read)]:
        got = read()
        for i, (want, have) in enumerate(zip(RECORDS, got)):
            check(want == have, f"{name}, record {i}: wrote {want}, read {have}")
        check(len(got) == len(RECORDS), f"{name} read {len(got)} records of {len(RECORDS)}")
        step(f"{codec}: {name} read every key, value and header back, null distinct from empty")



for codec in ["none", "gzip", "snappy", "lz4", "zstd"]:
    round_trip(f"{TOPIC}-{codec}", codec)

print("OK", flush=True)
