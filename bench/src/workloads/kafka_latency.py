"""Produce-to-consume latency through a Kafka broker with confluent-kafka (librdkafka).

Usage: python3 - BOOTSTRAP TOPIC PARTITIONS RATE RECORDS RECORD_BYTES [CODEC]  (script on stdin or -c)

A producer (linger.ms=0, acks=all, compression.type CODEC, none by default) sends RECORDS
records at RATE per second, open loop:
each record carries its scheduled send time, and its latency runs from that time to the
moment the consumer (assigned every partition, fetch.wait.max.ms=100) holds it, so a
stall is charged to every record it delays. Prints one JSON object: the latencies in
microseconds and the rate achieved.
"""

import json
import struct
import sys
import threading
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

bootstrap, topic = sys.argv[1], sys.argv[2]
partitions, rate, records, size = (int(x) for x in sys.argv[3:7])
codec = sys.argv[7] if len(sys.argv) > 7 else "none"
size = max(size, 8)
common = {"bootstrap.servers": bootstrap, "broker.address.family": "v4"}

consumer = Consumer({**common, "group.id": "sluice-bench-latency", "enable.auto.commit": False,
                     "fetch.wait.max.ms": 100, "fetch.min.bytes": 1})
consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
producer = Producer({**common, "linger.ms": 0, "acks": "all", "compression.type": codec})
padding = b"\0" * (size - 8)
WARMUP = (1 << 64) - 1

# Warm up: one record through, so connections and the assignment are in place.
producer.produce(topic, value=struct.pack(">Q", WARMUP) + padding, partition=0)
producer.flush(10)
deadline = time.time() + 20
warm = False
while not warm and time.time() < deadline:
    m = consumer.poll(0.2)
    warm = m is not None and m.error() is None
if not warm:
    sys.exit("the warm-up record never arrived")

latencies = []
done = threading.Event()


def consume():
    while len(latencies) < records and not done.is_set():
        m = consumer.poll(0.1)
        now = time.monotonic_ns()
        if m is None or m.error() is not None:
            continue
        (scheduled,) = struct.unpack(">Q", m.value()[:8])
        if scheduled != WARMUP:
            latencies.append((now - scheduled) // 1000)


t = threading.Thread(target=consume)
t.start()
period = 1_000_000_000 // rate
start = time.monotonic_ns() + 10_000_000
for i in range(records):
    due = start + i * period
    while True:
        left = due - time.monotonic_ns()
        if left <= 0:
            break
        time.sleep(left / 2e9 if left > 200_000 else 0)
    producer.produce(topic, value=struct.pack(">Q", due) + padding, partition=i % partitions)
    producer.poll(0)
sent_ns = time.monotonic_ns() - start
producer.flush(30)
t.join(timeout=60)
done.set()
consumer.close()
print(json.dumps({"latencies_us": latencies, "achieved_rate": records / (sent_ns / 1e9)}))
