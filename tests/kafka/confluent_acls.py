"""confluent-kafka (librdkafka) against `sluice serve --authorizer acl`, logged in with
SASL: what a principal's ACLs allow and deny.

Usage: python3 confluent_acls.py HOST:PORT USER PASSWORD MODE ARGS...
Modes:
  txn-denied TOPIC TXID   a transactional producer without Write on TXID is refused
  txn-ok TOPIC TXID       with it, a transaction commits
  group-denied TOPIC GROUP  a group consumer without Read on GROUP gets GROUP_AUTHORIZATION_FAILED
  acl-api TOPIC           CreateAcls, DescribeAcls and DeleteAcls (as a super user)
  acl-api-denied TOPIC    the same refused with CLUSTER_AUTHORIZATION_FAILED
  scram-api NAME PW       AlterUserScramCredentials makes a user who then logs in, Describe
                          lists it, a deletion removes it (as a super user)
Prints one line per step; exits non-zero on the first failed check.
"""

import sys

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)

from checks import check, step

BOOTSTRAP, USER, PASSWORD, MODE = sys.argv[1:5]
ARGS = sys.argv[5:]
COMMON = {
    "bootstrap.servers": BOOTSTRAP,
    "broker.address.family": "v4",
    "security.protocol": "SASL_PLAINTEXT",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": USER,
    "sasl.password": PASSWORD,
}


def code_of(e):
    err = e.args[0]
    return err.code() if isinstance(err, KafkaError) else None


if MODE == "txn-denied":
    topic, txid = ARGS
    p = Producer({**COMMON, "transactional.id": txid})
    try:
        p.init_transactions(15)
        check(False, "init_transactions must be refused")
    except KafkaException as e:
        check(code_of(e) == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, f"error {e.args[0]}")
    step(f"{USER}: transactional id {txid} refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
elif MODE == "txn-ok":
    topic, txid = ARGS
    p = Producer({**COMMON, "transactional.id": txid})
    p.init_transactions(15)
    p.begin_transaction()
    p.produce(topic, value=b"in a transaction")
    p.commit_transaction(15)
    step(f"{USER}: a transaction with id {txid} committed")
elif MODE == "group-denied":
    topic, group = ARGS
    c = Consumer({**COMMON, "group.id": group, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    seen = None
    for _ in range(20):
        m = c.poll(1)
        if m is not None and m.error() is not None:
            seen = m.error().code()
            break
    c.close()
    check(seen == KafkaError.GROUP_AUTHORIZATION_FAILED, f"error {seen}")
    step(f"{USER}: group {group} refused with GROUP_AUTHORIZATION_FAILED")
elif MODE in ("acl-api", "acl-api-denied"):
    (topic,) = ARGS
    admin = AdminClient(COMMON)
    rule = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:carol", "*",
                      AclOperation.READ, AclPermissionType.ALLOW)
    # carol's rules on the topic, whatever their pattern, host, operation or permission.
    anything = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.ANY, "User:carol", None,
                                AclOperation.ANY, AclPermissionType.ANY)
    if MODE == "acl-api-denied":
        try:
            admin.create_acls([rule])[rule].result(10)
            check(False, "create_acls must be refused")
        except KafkaException as e:
            check(code_of(e) == KafkaError.CLUSTER_AUTHORIZATION_FAILED, f"error {e.args[0]}")
        step(f"{USER}: CreateAcls refused with CLUSTER_AUTHORIZATION_FAILED")
    else:
        admin.create_acls([rule])[rule].result(10)
        found = admin.describe_acls(anything).result(10)
        check(rule in found, f"described {found}")
        step(f"{USER}: CreateAcls made a rule and DescribeAcls lists it")
        deleted = admin.delete_acls([anything])[anything].result(10)
        check(rule in deleted, f"deleted {deleted}")
        check(rule not in admin.describe_acls(anything).result(10), "gone")
        step(f"{USER}: DeleteAcls removed it")
elif MODE == "scram-api":
    from confluent_kafka.admin import (ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion,
                                       UserScramCredentialUpsertion)
    name, pw = ARGS
    admin = AdminClient(COMMON)
    up = UserScramCredentialUpsertion(name, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), pw.encode())
    admin.alter_user_scram_credentials([up])[name].result(10)
    described = admin.describe_user_scram_credentials([name])[name].result(10)
    mechs = [(i.mechanism, i.iterations) for i in described.scram_credential_infos]
    check(mechs == [(ScramMechanism.SCRAM_SHA_512, 4096)], f"described {mechs}")
    step(f"{USER}: AlterUserScramCredentials made {name}; Describe lists SCRAM-SHA-512, 4096 iterations")
    other = AdminClient({**COMMON, "sasl.username": name, "sasl.password": pw})
    other.list_topics(timeout=10)
    step(f"{name} logs in with the password the client salted")
    gone = UserScramCredentialDeletion(name, ScramMechanism.SCRAM_SHA_512)
    admin.alter_user_scram_credentials([gone])[name].result(10)
    try:
        admin.describe_user_scram_credentials([name])[name].result(10)
        check(False, "a deleted user must not be described")
    except KafkaException as e:
        check(code_of(e) == KafkaError.RESOURCE_NOT_FOUND, f"error {e.args[0]}")
    step(f"{USER}: a deletion removed {name}")
else:
    check(False, f"unknown mode {MODE}")
print("OK")
