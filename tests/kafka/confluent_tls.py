"""confluent-kafka (librdkafka) over mutual TLS to an SSL listener of `sluice serve`:
produce and group-consume with a client certificate.

Usage: python3 confluent_tls.py HOST:PORT TOPIC NAME=VALUE ...
The NAME=VALUE pairs are the client's TLS settings (security.protocol=SSL,
ssl.ca.location, ssl.certificate.location, ssl.key.location). Prints one line per step;
exits non-zero on the first failed check.
"""

import sys

from confluent_kafka import Consumer, Producer

from checks import check, consume_values, step

BOOTSTRAP, TOPIC = sys.argv[1:3]
TLS = dict(a.split("=", 1) for a in sys.argv[3:])
COMMON = {"bootstrap.servers": BOOTSTRAP, "broker.address.family": "v4", **TLS}

p = Producer({**COMMON, "enable.idempotence": True})
sent = [f"tls record {i}".encode() for i in range(5)]
for v in sent:
    p.produce(TOPIC, value=v)
check(p.flush(15) == 0, "every record delivered")
step(f"produced {len(sent)} records over mutual TLS")

c = Consumer({**COMMON, "group.id": "tls-readers", "auto.offset.reset": "earliest"})
c.subscribe([TOPIC])
got = consume_values(c, len(sent))
c.close()
check(got == sent, f"read back {got}")
step("a group consumer read them back in order over mutual TLS")
print("OK")
