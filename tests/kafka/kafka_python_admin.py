"""kafka-python (3.x)'s KafkaAdminClient against `sluice serve` started with
--num-partitions 3: describe_cluster, describe_configs, alter_configs (incremental, and
the legacy full replace), create_partitions, the broker's read-only settings, and bad
input refused with Kafka's error codes, with the effects checked through a producer.

Usage: python3 kafka_python_admin.py HOST:PORT TOPIC
Prints one line per step; exits non-zero on the first failed check.
"""

import sys

import kafka
import kafka.errors as errors
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

from checks import check, step

BOOTSTRAP, TOPIC = sys.argv[1], sys.argv[2]

admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP, request_timeout_ms=10000)
topic = ConfigResource(ConfigResourceType.TOPIC, TOPIC)
broker = ConfigResource(ConfigResourceType.BROKER, "0")


def configs(resource, config_filter="all"):
    kind = resource.resource_type.name.lower()
    return admin.describe_configs([resource], config_filter=config_filter)[kind][resource.name]


def alter(resource, settings, **kw):
    kind = resource.resource_type.name.lower()
    res = ConfigResource(resource.resource_type, resource.name, configs=settings)
    return str(admin.alter_configs([res], **kw)[kind][resource.name])


cluster = admin.describe_cluster()
check(cluster["cluster_id"] == "sluice" and cluster["controller_id"] == 0, f"{cluster}")
check([b["broker_id"] for b in cluster["brokers"]] == [0], f"{cluster['brokers']}")
step(f"describe_cluster (kafka-python {kafka.__version__}): cluster sluice, controller 0, one broker")

admin.create_topics([NewTopic(TOPIC, num_partitions=2, replication_factor=1)])
all_configs = configs(topic)
check(all(c["config_source"] == "DEFAULT_CONFIG" for c in all_configs.values()), f"{all_configs}")
check(all_configs["cleanup.policy"]["config_type"] == "LIST", f"{all_configs['cleanup.policy']}")
check(configs(topic, "modified") == {}, "nothing modified yet")
step(f"describe_configs: {len(all_configs)} configs, all DEFAULT_CONFIG")

check(alter(topic, {"retention.ms": "60000", "max.message.bytes": "100"}) == "OK", "incremental alter")
modified = configs(topic, "modified")
check(sorted(modified) == ["max.message.bytes", "retention.ms"], f"{modified}")
check(modified["retention.ms"]["value"] == "60000" and modified["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG",
      f"{modified['retention.ms']}")
# The legacy AlterConfigs replaces; kafka-python sends the modified settings along.
check(alter(topic, {"segment.bytes": "1048576"}, incremental=False) == "OK", "legacy alter")
modified = configs(topic, "modified")
check({k: v["value"] for k, v in modified.items()}
      == {"retention.ms": "60000", "segment.bytes": "1048576", "max.message.bytes": "100"}, f"{modified}")
step("alter_configs: incremental, then the legacy replace, each kept what it should")

producer = KafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all", retries=0)
try:
    producer.send(TOPIC, value=b"x" * 500).get(timeout=10)
    check(False, "a 500-byte record over max.message.bytes=100 must be refused")
except errors.MessageSizeTooLargeError:
    pass
producer.send(TOPIC, value=b"small").get(timeout=10)
step("max.message.bytes=100: a 500-byte record refused (MessageSizeTooLargeError), a small one taken")

bad = alter(topic, {"retention.ms": "abc"})
check(bad.startswith("[Error 40]") and "retention.ms" in bad, bad)
bad = alter(topic, {"colour": "blue"}, raise_on_unknown=False)
check(bad.startswith("[Error 40]") and "colour" in bad, bad)
try:
    alter(topic, {"colour": "blue"})
    check(False, "kafka-python refuses names the broker does not list as alterable")
except ValueError:
    pass
check(configs(topic, "modified")["retention.ms"]["value"] == "60000", "nothing changed")
step("bad input: INVALID_CONFIG (40) naming the config, and the unknown name is not listed as alterable")

broker_configs = configs(broker)
check(broker_configs["num.partitions"]["value"] == "3" and broker_configs["num.partitions"]["read_only"],
      f"{broker_configs['num.partitions']}")
refused = alter(broker, {"num.partitions": "5"}, raise_on_unknown=False)
check(refused.startswith("[Error 42]"), refused)
step("broker 0: num.partitions=3 read-only; altering it is INVALID_REQUEST (42)")

try:
    admin.create_partitions({TOPIC: 1})
    check(False, "shrinking must fail")
except errors.InvalidPartitionsError as e:
    check("higher than the requested 1" in str(e), f"{e}")
admin.create_partitions({TOPIC: 3})
check(len(admin.describe_topics([TOPIC])[0]["partitions"]) == 3, "3 partitions")
producer.close()
# A new producer (the old one's metadata is its own cache, refreshed only after a while).
producer = KafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all")
meta = producer.send(TOPIC, value=b"new", partition=2).get(timeout=10)
check((meta.partition, meta.offset) == (2, 0), f"{meta}")
producer.close()
step("create_partitions: shrinking is InvalidPartitionsError; grown to 3, partition 2 takes a record at offset 0")
print("OK", flush=True)
