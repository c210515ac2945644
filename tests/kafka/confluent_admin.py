"""confluent-kafka's AdminClient (librdkafka) against `sluice serve`: describe_cluster,
describe_configs, alter_configs, incremental_alter_configs and create_partitions, with
their effects checked for real (segments removed by the cleaner, a record over
max.message.bytes refused, records in the new partitions), bad input refused with
Kafka's error codes, and after a restart the altered configs and partition counts kept.

Usage: python3 confluent_admin.py HOST:PORT TOPIC before|after
  before: the server runs with --num-partitions 3 --retention-check-ms 200
  after:  the same data directory, restarted with --auto-create-topics false
          --transaction-max-timeout-ms 60000
Prints one line per step; exits non-zero on the first failed check.
"""

import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                   NewPartitions, NewTopic)

from checks import check, step

BOOTSTRAP, TOPIC, PHASE = sys.argv[1], sys.argv[2], sys.argv[3]
ASSIGNED = TOPIC + "-assigned"
LEGACY = TOPIC + "-legacy"
AUTO = TOPIC + "-auto"
COMMON = {"bootstrap.servers": BOOTSTRAP, "broker.address.family": "v4"}
admin = AdminClient(COMMON)


def error_of(future):
    """The KafkaError a future fails with (a check fails if it succeeds)."""
    try:
        future.result(timeout=10)
    except KafkaException as e:
        return e.args[0]
    check(False, "expected an error")


def topic_configs(topic):
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([res])[res].result(timeout=10)


def value(configs, name):
    return configs[name].value


def source(entry):
    """An entry's config source as Kafka's number (the client may give an enum)."""
    return int(getattr(entry.source, "value", entry.source))


def partitions(topic):
    return len(admin.list_topics(topic=topic, timeout=10).topics[topic].partitions)


def produce(topic, n, size, partition=None, props=None):
    """Produces n records of `size` bytes; returns the delivery errors (None for each success)."""
    errors = []
    p = Producer({**COMMON, "linger.ms": 0, "batch.num.messages": 1, **(props or {})})
    for i in range(n):
        kw = {} if partition is None else {"partition": partition}
        p.produce(topic, key=f"k{i}".encode(), value=b"v" * size, on_delivery=lambda err, msg: errors.append(err), **kw)
        p.poll(0)
    check(p.flush(30) == 0, "flush left messages")
    return errors


def low_watermarks(topic, n):
    c = Consumer({**COMMON, "group.id": "watermarks"})
    marks = [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in range(n)]
    c.close()
    return marks


if PHASE == "before":
    cluster = admin.describe_cluster(include_authorized_operations=True).result(timeout=10)
    check(cluster.cluster_id == "sluice", f"cluster id {cluster.cluster_id}")
    check(cluster.controller.id == 0 and [n.id for n in cluster.nodes] == [0], f"{cluster.controller} {cluster.nodes}")
    step(f"describe_cluster: cluster {cluster.cluster_id}, controller {cluster.controller.id}, nodes {[n.id for n in cluster.nodes]}")

    broker = ConfigResource(ConfigResource.Type.BROKER, "0")
    bc = admin.describe_configs([broker])[broker].result(timeout=10)
    check(bc["num.partitions"].value == "3" and bc["num.partitions"].is_read_only, f"{bc['num.partitions']}")
    check(bc["auto.create.topics.enable"].value == "true", f"{bc['auto.create.topics.enable']}")
    check(bc["transaction.max.timeout.ms"].value == "900000", f"{bc['transaction.max.timeout.ms']}")
    err = error_of(admin.incremental_alter_configs([ConfigResource(
        ConfigResource.Type.BROKER, "0",
        incremental_configs=[ConfigEntry("num.partitions", "5", incremental_operation=AlterConfigOpType.SET)])])[broker])
    check(err.code() == KafkaError.INVALID_REQUEST and "num.partitions" in err.str(), f"{err}")
    step("broker 0: num.partitions=3, auto.create.topics.enable=true read-only; altering it is INVALID_REQUEST")

    # Topics: defaults, a single-replica assignment, a refused assignment.
    for f in admin.create_topics([NewTopic(TOPIC, num_partitions=2, replication_factor=1),
                                  NewTopic(ASSIGNED, num_partitions=2, replica_assignment=[[0], [0]]),
                                  NewTopic(LEGACY, num_partitions=1, replication_factor=1,
                                           config={"retention.ms": "3600000", "cleanup.policy": "compact"})]).values():
        f.result(timeout=10)
    check(partitions(ASSIGNED) == 2, "assigned topic has 2 partitions")
    err = error_of(admin.create_topics([NewTopic(TOPIC + "-elsewhere", num_partitions=1, replica_assignment=[[1]])])[TOPIC + "-elsewhere"])
    check(err.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT, f"{err}")
    err = error_of(admin.create_topics([NewTopic(TOPIC + "-rf3", num_partitions=1, replication_factor=3)])[TOPIC + "-rf3"])
    check(err.code() == KafkaError.INVALID_REPLICATION_FACTOR, f"{err}")
    step("create_topics: an assignment on node 0 taken; one on node 1 INVALID_REPLICA_ASSIGNMENT; rf 3 INVALID_REPLICATION_FACTOR")

    configs = topic_configs(TOPIC)
    check(value(configs, "retention.ms") == "-1" and source(configs["retention.ms"]) == ConfigSource.DEFAULT_CONFIG.value,
          f"{configs['retention.ms']}")
    check(value(configs, "cleanup.policy") == "delete", f"{configs['cleanup.policy']}")
    legacy = topic_configs(LEGACY)
    check(source(legacy["retention.ms"]) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, f"{legacy['retention.ms']}")
    step(f"describe_configs: {len(configs)} configs of {TOPIC}, sources DEFAULT_CONFIG, and DYNAMIC_TOPIC_CONFIG where set")

    # Bad input: each refused with its code, nothing changed.
    res = ConfigResource(ConfigResource.Type.TOPIC, TOPIC, incremental_configs=[
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)])
    err = error_of(admin.incremental_alter_configs([res])[res])
    check(err.code() == KafkaError.INVALID_CONFIG and "retention.ms" in err.str(), f"{err}")
    res = ConfigResource(ConfigResource.Type.TOPIC, TOPIC, incremental_configs=[
        ConfigEntry("colour", "blue", incremental_operation=AlterConfigOpType.SET)])
    err = error_of(admin.incremental_alter_configs([res])[res])
    check(err.code() == KafkaError.INVALID_CONFIG and "colour" in err.str(), f"{err}")
    res = ConfigResource(ConfigResource.Type.TOPIC, TOPIC + "-missing", incremental_configs=[
        ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)])
    err = error_of(admin.incremental_alter_configs([res])[res])
    check(err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART, f"{err}")
    missing = ConfigResource(ConfigResource.Type.TOPIC, TOPIC + "-missing")
    err = error_of(admin.describe_configs([missing])[missing])
    check(err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART, f"{err}")
    err = error_of(admin.create_partitions([NewPartitions(TOPIC, 1)])[TOPIC])
    check(err.code() == KafkaError.INVALID_PARTITIONS and "higher than the requested 1" in err.str(), f"{err}")
    res = ConfigResource(ConfigResource.Type.TOPIC, TOPIC, incremental_configs=[
        ConfigEntry("retention.bytes", "1", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res], validate_only=True)[res].result(timeout=10)
    check(value(topic_configs(TOPIC), "retention.bytes") == "-1", "validate_only changed nothing")
    step("bad input: INVALID_CONFIG naming the config, UNKNOWN_TOPIC_OR_PART, INVALID_PARTITIONS; validate_only stores nothing")

    # Small segments and a small retention: the cleaner (every 200 ms) removes segments.
    res = ConfigResource(ConfigResource.Type.TOPIC, TOPIC, incremental_configs=[
        ConfigEntry("segment.bytes", "4096", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.bytes", "8192", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
    admin.incremental_alter_configs([res])[res].result(timeout=10)
    configs = topic_configs(TOPIC)
    check(value(configs, "cleanup.policy") == "compact,delete", f"{configs['cleanup.policy']}")
    check(source(configs["segment.bytes"]) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, f"{configs['segment.bytes']}")
    errors = produce(TOPIC, 200, 300, partition=0)
    check(all(e is None for e in errors), f"delivery errors {set(errors)}")
    deadline = time.time() + 20
    while low_watermarks(TOPIC, 1)[0][0] == 0:
        check(time.time() < deadline, "the cleaner did not delete segments within 20 s")
        time.sleep(0.2)
    low, high = low_watermarks(TOPIC, 1)[0]
    step(f"incremental_alter_configs: segment.bytes=4096 retention.bytes=8192: the cleaner moved partition 0 to [{low}, {high})")

    res = ConfigResource(ConfigResource.Type.TOPIC, TOPIC, incremental_configs=[
        ConfigEntry("max.message.bytes", "1000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(timeout=10)
    errors = produce(TOPIC, 1, 2000)
    check(errors[0] is not None and errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE, f"{errors}")
    check(produce(TOPIC, 1, 500) == [None], "a record under the limit")
    step("max.message.bytes=1000: a 2000-byte record MSG_SIZE_TOO_LARGE, a 500-byte one delivered")

    # Legacy AlterConfigs replaces: what it leaves out goes back to the default.
    res = ConfigResource(ConfigResource.Type.TOPIC, LEGACY, set_config={"delete.retention.ms": "1000"})
    admin.alter_configs([res])[res].result(timeout=10)
    legacy = topic_configs(LEGACY)
    check(value(legacy, "delete.retention.ms") == "1000", f"{legacy['delete.retention.ms']}")
    check(value(legacy, "retention.ms") == "-1" and value(legacy, "cleanup.policy") == "delete", "the rest back to defaults")
    step("alter_configs: delete.retention.ms set, retention.ms and cleanup.policy back to their defaults")

    # Partitions: grow, then produce to the new ones and read them back.
    admin.create_partitions([NewPartitions(TOPIC, 4)])[TOPIC].result(timeout=10)
    check(partitions(TOPIC) == 4, "4 partitions in the metadata")
    check(produce(TOPIC, 3, 10, partition=2) + produce(TOPIC, 3, 10, partition=3) == [None] * 6, "delivered")
    marks = low_watermarks(TOPIC, 4)
    check(marks[2] == (0, 3) and marks[3] == (0, 3), f"watermarks {marks}")
    step(f"create_partitions: {TOPIC} has 4 partitions; 3 records each in partitions 2 and 3")

    # Auto-creation takes num.partitions.
    md = Producer(COMMON).list_topics(topic=AUTO, timeout=10)
    check(md.topics[AUTO].error is None and len(md.topics[AUTO].partitions) == 3, f"{md.topics[AUTO]}")
    step(f"auto-created {AUTO} with num.partitions=3")
    print("OK", flush=True)

elif PHASE == "after":
    configs = topic_configs(TOPIC)
    kept = {n: value(configs, n) for n in ("segment.bytes", "retention.bytes", "max.message.bytes", "cleanup.policy")}
    check(kept == {"segment.bytes": "4096", "retention.bytes": "8192", "max.message.bytes": "1000",
                   "cleanup.policy": "compact,delete"}, f"{kept}")
    check(partitions(TOPIC) == 4, "4 partitions after the restart")
    check(low_watermarks(TOPIC, 4)[3] == (0, 3), "partition 3's records kept")
    errors = produce(TOPIC, 1, 2000)
    check(errors[0] is not None and errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE, f"{errors}")
    step(f"after a restart: {kept}, 4 partitions, a 2000-byte record still refused")

    broker = ConfigResource(ConfigResource.Type.BROKER, "0")
    bc = admin.describe_configs([broker])[broker].result(timeout=10)
    check(bc["auto.create.topics.enable"].value == "false", f"{bc['auto.create.topics.enable']}")
    check(bc["transaction.max.timeout.ms"].value == "60000", f"{bc['transaction.max.timeout.ms']}")
    md = Producer(COMMON).list_topics(topic=AUTO + "-2", timeout=10)
    check(md.topics[AUTO + "-2"].error is not None
          and md.topics[AUTO + "-2"].error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART, f"{md.topics[AUTO + '-2']}")
    step("--auto-create-topics false: an unknown topic is UNKNOWN_TOPIC_OR_PART, not created")

    long_txn = Producer({**COMMON, "transactional.id": "too-long", "transaction.timeout.ms": 120000})
    try:
        long_txn.init_transactions(10)
        check(False, "a transaction timeout over transaction.max.timeout.ms must be refused")
    except KafkaException as e:
        check(e.args[0].code() == KafkaError.INVALID_TRANSACTION_TIMEOUT, f"{e}")
    Producer({**COMMON, "transactional.id": "short", "transaction.timeout.ms": 30000}).init_transactions(10)
    step("--transaction-max-timeout-ms 60000: 120000 is INVALID_TRANSACTION_TIMEOUT, 30000 is taken")
    print("OK", flush=True)

else:
    check(False, f"phase {PHASE}")
