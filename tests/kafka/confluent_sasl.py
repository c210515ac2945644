"""confluent-kafka (librdkafka) logging in to a SASL listener of `sluice serve`: produce
and consume as a user with each mechanism, and a wrong password that reads nothing.

Usage: python3 confluent_sasl.py HOST:PORT TOPIC USER PASSWORD [NAME=VALUE ...]
The NAME=VALUE pairs are more client settings (security.protocol=SASL_SSL and
ssl.ca.location=... for SASL over TLS). Prints one line per step; exits non-zero on the
first failed check.
"""

import sys

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from checks import check, consume_values, step

BOOTSTRAP, TOPIC, USER, PASSWORD = sys.argv[1:5]
EXTRA = dict(a.split("=", 1) for a in sys.argv[5:])


def conf(mechanism, password=PASSWORD, **more):
    c = {
        "bootstrap.servers": BOOTSTRAP,
        "broker.address.family": "v4",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": USER,
        "sasl.password": password,
    }
    c.update(EXTRA)
    c.update(more)
    return c


sent = []
for mechanism in ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"]:
    p = Producer(conf(mechanism, **{"enable.idempotence": True}))
    value = f"via {mechanism}".encode()
    p.produce(TOPIC, key=mechanism.encode(), value=value)
    check(p.flush(15) == 0, f"{mechanism}: every record delivered")
    sent.append(value)
    step(f"{mechanism}: produced as {USER}")

c = Consumer(conf("SCRAM-SHA-512", **{"group.id": "sasl-readers", "auto.offset.reset": "earliest"}))
c.subscribe([TOPIC])
got = consume_values(c, len(sent))
c.close()
check(sorted(got) == sorted(sent), f"read back {got}")
step("SCRAM-SHA-512: a group consumer read every record back")

# A wrong password: the admin client cannot even list topics.
admin = AdminClient(conf("SCRAM-SHA-512", password=PASSWORD + "-wrong"))
try:
    admin.list_topics(timeout=5)
    check(False, "a wrong password must not list topics")
except KafkaException as e:
    step(f"a wrong password fails: {e.args[0].name()}")

print("OK")
