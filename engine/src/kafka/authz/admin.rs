//! Topic administration, configs, the cluster, transactions and the ACL APIs: CreateTopics
//! needs Create on the cluster or the topic, DeleteTopics and DeleteRecords Delete,
//! CreatePartitions Alter, DescribeConfigs DescribeConfigs and (Incremental)AlterConfigs
//! AlterConfigs on the topic or, for the broker, the cluster; DescribeCluster and
//! DescribeAcls and DescribeUserScramCredentials need Describe on the cluster, CreateAcls,
//! DeleteAcls and AlterUserScramCredentials Alter; a
//! transactional producer needs Write on its transactional id (and its partitions Write
//! on their topics, its offsets Read on the group and the topics), an idempotent one
//! IdempotentWrite on the cluster or Write on some topic.

use kafka_protocol::messages::{
    AddOffsetsToTxnResponse, DescribeClusterResponse, EndTxnResponse, InitProducerIdResponse, RequestKind,
    ResponseKind, add_partitions_to_txn_response, alter_configs_response, create_partitions_response,
    create_topics_response, delete_records_response, delete_topics_response, describe_configs_response,
    incremental_alter_configs_response, txn_offset_commit_response,
};

use super::{Authz, Screened, code};
use crate::security::acl::{CLUSTER, Operation, ResourceType};

fn answer(resp: ResponseKind) -> Screened {
    Screened::Answer(Box::new(resp))
}

fn go(request: RequestKind) -> Screened {
    Screened::Go(Box::new(request), None)
}

fn topic(authz: &Authz, op: Operation, name: &str) -> bool {
    authz.allows(op, ResourceType::Topic, name)
}

fn cluster(authz: &Authz, op: Operation) -> bool {
    authz.allows(op, ResourceType::Cluster, CLUSTER)
}

/// A config resource's check: a topic (type 2) by its name, the broker (type 4) as the
/// cluster; its error code when denied.
fn config_resource(authz: &Authz, op: Operation, kind: i8, name: &str) -> Result<(), i16> {
    match kind {
        2 if !topic(authz, op, name) => Err(code::TOPIC),
        4 if !cluster(authz, op) => Err(code::CLUSTER),
        _ => Ok(()),
    }
}

/// Screens an API of this group; an API the screen does not know closes the connection.
pub(super) fn screen(authz: &Authz, request: RequestKind) -> Screened {
    let request = match topics(authz, request) {
        Ok(screened) => return screened,
        Err(other) => *other,
    };
    match configs(authz, request) {
        Ok(screened) => screened,
        Err(other) => cluster_and_acls(authz, *other),
    }
}

/// CreateTopics, DeleteTopics, DeleteRecords, CreatePartitions; `Err` gives back another.
fn topics(authz: &Authz, request: RequestKind) -> Result<Screened, Box<RequestKind>> {
    Ok(match request {
        RequestKind::CreateTopics(mut r) => {
            let mut denied = Vec::new();
            r.topics.retain(|t| {
                let ok = authz.allows_on_cluster_or(Operation::Create, ResourceType::Topic, t.name.0.as_str());
                if !ok {
                    denied.push(t.name.clone());
                }
                ok
            });
            patched(RequestKind::CreateTopics(r), move |resp| {
                let ResponseKind::CreateTopics(resp) = resp else { return };
                for name in denied {
                    let mut t = create_topics_response::CreatableTopicResult::default();
                    t.name = name;
                    t.error_code = code::TOPIC;
                    t.num_partitions = -1;
                    t.replication_factor = -1;
                    resp.topics.push(t);
                }
            })
        }
        RequestKind::DeleteTopics(mut r) => {
            let ctx = authz.ctx().cloned();
            let name_of = |id: uuid::Uuid| ctx.as_ref()?.engine.topic_name(crate::topic::meta::TopicId(id));
            let mut denied = Vec::new();
            r.topic_names.retain(|n| {
                topic(authz, Operation::Delete, n.0.as_str())
                    || (denied.push((Some(n.clone()), uuid::Uuid::nil())), false).1
            });
            r.topics.retain(|t| {
                let name = t.name.as_ref().map(|n| n.0.to_string()).or_else(|| name_of(t.topic_id));
                let ok = name.is_none_or(|n| topic(authz, Operation::Delete, &n));
                if !ok {
                    denied.push((t.name.clone(), t.topic_id));
                }
                ok
            });
            patched(RequestKind::DeleteTopics(r), move |resp| {
                let ResponseKind::DeleteTopics(resp) = resp else { return };
                for (name, id) in denied {
                    let mut t = delete_topics_response::DeletableTopicResult::default();
                    t.name = name;
                    t.topic_id = id;
                    t.error_code = code::TOPIC;
                    resp.responses.push(t);
                }
            })
        }
        RequestKind::DeleteRecords(mut r) => {
            let mut denied = Vec::new();
            r.topics.retain(|t| {
                let ok = topic(authz, Operation::Delete, t.name.0.as_str());
                if !ok {
                    denied.push((t.name.clone(), t.partitions.iter().map(|p| p.partition_index).collect::<Vec<_>>()));
                }
                ok
            });
            patched(RequestKind::DeleteRecords(r), move |resp| {
                let ResponseKind::DeleteRecords(resp) = resp else { return };
                for (name, partitions) in denied {
                    let mut t = delete_records_response::DeleteRecordsTopicResult::default();
                    t.name = name;
                    t.partitions = partitions
                        .into_iter()
                        .map(|i| {
                            let mut p = delete_records_response::DeleteRecordsPartitionResult::default();
                            p.partition_index = i;
                            p.low_watermark = -1;
                            p.error_code = code::TOPIC;
                            p
                        })
                        .collect();
                    resp.topics.push(t);
                }
            })
        }
        RequestKind::CreatePartitions(mut r) => {
            let mut denied = Vec::new();
            let alter = Operation::Alter;
            r.topics.retain(|t| topic(authz, alter, t.name.0.as_str()) || (denied.push(t.name.clone()), false).1);
            patched(RequestKind::CreatePartitions(r), move |resp| {
                let ResponseKind::CreatePartitions(resp) = resp else { return };
                for name in denied {
                    let mut t = create_partitions_response::CreatePartitionsTopicResult::default();
                    t.name = name;
                    t.error_code = code::TOPIC;
                    resp.results.push(t);
                }
            })
        }
        other => return Err(Box::new(other)),
    })
}

/// DescribeConfigs, AlterConfigs, IncrementalAlterConfigs; `Err` gives back another.
fn configs(authz: &Authz, request: RequestKind) -> Result<Screened, Box<RequestKind>> {
    use Operation::{AlterConfigs, DescribeConfigs};
    Ok(match request {
        RequestKind::DescribeConfigs(mut r) => {
            let mut denied = Vec::new();
            r.resources.retain(|c| {
                match config_resource(authz, DescribeConfigs, c.resource_type, c.resource_name.as_str()) {
                    Ok(()) => true,
                    Err(e) => (denied.push((c.resource_type, c.resource_name.clone(), e)), false).1,
                }
            });
            patched(RequestKind::DescribeConfigs(r), move |resp| {
                let ResponseKind::DescribeConfigs(resp) = resp else { return };
                for (kind, name, error) in denied {
                    let mut c = describe_configs_response::DescribeConfigsResult::default();
                    (c.resource_type, c.resource_name, c.error_code) = (kind, name, error);
                    resp.results.push(c);
                }
            })
        }
        RequestKind::AlterConfigs(mut r) => {
            let mut denied = Vec::new();
            r.resources.retain(|c| {
                match config_resource(authz, AlterConfigs, c.resource_type, c.resource_name.as_str()) {
                    Ok(()) => true,
                    Err(e) => (denied.push((c.resource_type, c.resource_name.clone(), e)), false).1,
                }
            });
            patched(RequestKind::AlterConfigs(r), move |resp| {
                let ResponseKind::AlterConfigs(resp) = resp else { return };
                for (kind, name, error) in denied {
                    let mut c = alter_configs_response::AlterConfigsResourceResponse::default();
                    (c.resource_type, c.resource_name, c.error_code) = (kind, name, error);
                    resp.responses.push(c);
                }
            })
        }
        RequestKind::IncrementalAlterConfigs(mut r) => {
            let mut denied = Vec::new();
            r.resources.retain(|c| {
                match config_resource(authz, AlterConfigs, c.resource_type, c.resource_name.as_str()) {
                    Ok(()) => true,
                    Err(e) => (denied.push((c.resource_type, c.resource_name.clone(), e)), false).1,
                }
            });
            patched(RequestKind::IncrementalAlterConfigs(r), move |resp| {
                let ResponseKind::IncrementalAlterConfigs(resp) = resp else { return };
                for (kind, name, error) in denied {
                    let mut c = incremental_alter_configs_response::AlterConfigsResourceResponse::default();
                    (c.resource_type, c.resource_name, c.error_code) = (kind, name, error);
                    resp.responses.push(c);
                }
            })
        }
        other => return Err(Box::new(other)),
    })
}

/// DescribeCluster and the ACL APIs, then the transaction APIs.
fn cluster_and_acls(authz: &Authz, request: RequestKind) -> Screened {
    use Operation::{Alter, Describe};
    match request {
        RequestKind::DescribeCluster(r) if cluster(authz, Describe) => go(RequestKind::DescribeCluster(r)),
        RequestKind::DescribeCluster(_) => {
            let mut resp = DescribeClusterResponse::default();
            resp.error_code = code::CLUSTER;
            answer(ResponseKind::DescribeCluster(resp))
        }
        RequestKind::CreateAcls(r) if cluster(authz, Alter) => go(RequestKind::CreateAcls(r)),
        RequestKind::DeleteAcls(r) if cluster(authz, Alter) => go(RequestKind::DeleteAcls(r)),
        RequestKind::DescribeAcls(r) if cluster(authz, Describe) => go(RequestKind::DescribeAcls(r)),
        RequestKind::DescribeUserScramCredentials(r) if cluster(authz, Describe) => {
            go(RequestKind::DescribeUserScramCredentials(r))
        }
        RequestKind::AlterUserScramCredentials(r) if cluster(authz, Alter) => {
            go(RequestKind::AlterUserScramCredentials(r))
        }
        RequestKind::DescribeUserScramCredentials(_) => {
            let mut resp = kafka_protocol::messages::DescribeUserScramCredentialsResponse::default();
            resp.error_code = code::CLUSTER;
            answer(ResponseKind::DescribeUserScramCredentials(resp))
        }
        RequestKind::AlterUserScramCredentials(r) => {
            let mut resp = kafka_protocol::messages::AlterUserScramCredentialsResponse::default();
            for name in r.deletions.iter().map(|d| &d.name).chain(r.upsertions.iter().map(|u| &u.name)) {
                let mut x = kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult::default();
                (x.user, x.error_code) = (name.clone(), code::CLUSTER);
                resp.results.push(x);
            }
            answer(ResponseKind::AlterUserScramCredentials(resp))
        }
        RequestKind::CreateAcls(r) => answer(super::super::acls::create_denied(&r)),
        RequestKind::DeleteAcls(r) => answer(super::super::acls::delete_denied(&r)),
        RequestKind::DescribeAcls(_) => answer(super::super::acls::describe_denied()),
        other => transactions(authz, other),
    }
}

fn patched(request: RequestKind, patch: impl FnOnce(&mut ResponseKind) + 'static) -> Screened {
    Screened::Go(Box::new(request), Some(Box::new(patch)))
}

fn txn_id(authz: &Authz, id: &str) -> bool {
    authz.allows(Operation::Write, ResourceType::TransactionalId, id)
}

/// The transaction APIs; an API no screen knows closes the connection.
fn transactions(authz: &Authz, request: RequestKind) -> Screened {
    match request {
        RequestKind::InitProducerId(r) => {
            let ok = match &r.transactional_id {
                Some(id) => txn_id(authz, id.0.as_str()),
                None => authz.allows_idempotent_write(),
            };
            if ok {
                return go(RequestKind::InitProducerId(r));
            }
            let mut resp = InitProducerIdResponse::default();
            resp.error_code = if r.transactional_id.is_some() { code::TRANSACTIONAL_ID } else { code::CLUSTER };
            resp.producer_id = kafka_protocol::messages::ProducerId(-1);
            resp.producer_epoch = -1;
            answer(ResponseKind::InitProducerId(resp))
        }
        RequestKind::AddPartitionsToTxn(r) => add_partitions(authz, r),
        RequestKind::AddOffsetsToTxn(r) => {
            let error = if !txn_id(authz, r.transactional_id.0.as_str()) {
                code::TRANSACTIONAL_ID
            } else if !authz.allows(Operation::Read, ResourceType::Group, r.group_id.0.as_str()) {
                code::GROUP
            } else {
                return go(RequestKind::AddOffsetsToTxn(r));
            };
            let mut resp = AddOffsetsToTxnResponse::default();
            resp.error_code = error;
            answer(ResponseKind::AddOffsetsToTxn(resp))
        }
        RequestKind::TxnOffsetCommit(r) => {
            let error = if !txn_id(authz, r.transactional_id.0.as_str()) {
                Some(code::TRANSACTIONAL_ID)
            } else if !authz.allows(Operation::Read, ResourceType::Group, r.group_id.0.as_str()) {
                Some(code::GROUP)
            } else if !r.topics.iter().all(|t| authz.allows(Operation::Read, ResourceType::Topic, t.name.0.as_str())) {
                Some(code::TOPIC)
            } else {
                None
            };
            let Some(error) = error else { return go(RequestKind::TxnOffsetCommit(r)) };
            let mut resp = kafka_protocol::messages::TxnOffsetCommitResponse::default();
            for t in r.topics {
                let mut rt = txn_offset_commit_response::TxnOffsetCommitResponseTopic::default();
                rt.name = t.name;
                rt.partitions = t
                    .partitions
                    .iter()
                    .map(|p| {
                        let mut rp = txn_offset_commit_response::TxnOffsetCommitResponsePartition::default();
                        rp.partition_index = p.partition_index;
                        rp.error_code = error;
                        rp
                    })
                    .collect();
                resp.topics.push(rt);
            }
            answer(ResponseKind::TxnOffsetCommit(resp))
        }
        RequestKind::EndTxn(r) if txn_id(authz, r.transactional_id.0.as_str()) => go(RequestKind::EndTxn(r)),
        RequestKind::EndTxn(_) => {
            let mut resp = EndTxnResponse::default();
            resp.error_code = code::TRANSACTIONAL_ID;
            answer(ResponseKind::EndTxn(resp))
        }
        _ => Screened::Close("a request with no authorization check, refused while ACLs are on".into()),
    }
}

/// AddPartitionsToTxn: Write on the transactional id and on each topic; when any is
/// denied, none of the request's partitions is added (Kafka's rule) and the others are
/// answered OPERATION_NOT_ATTEMPTED.
fn add_partitions(authz: &Authz, mut r: kafka_protocol::messages::AddPartitionsToTxnRequest) -> Screened {
    let id_ok = txn_id(authz, r.v3_and_below_transactional_id.0.as_str());
    let mut denied = Vec::new();
    r.v3_and_below_topics.retain(|t| {
        let ok = id_ok && authz.allows(Operation::Write, ResourceType::Topic, t.name.0.as_str());
        if !ok {
            denied.push((
                t.name.clone(),
                t.partitions.clone(),
                if id_ok { code::TOPIC } else { code::TRANSACTIONAL_ID },
            ));
        }
        ok
    });
    if denied.is_empty() {
        return go(RequestKind::AddPartitionsToTxn(r));
    }
    // Kafka adds none of a request's partitions when any is denied; the rest are
    // answered OPERATION_NOT_ATTEMPTED.
    let mut resp = kafka_protocol::messages::AddPartitionsToTxnResponse::default();
    let result = |name, partitions: Vec<i32>, error| {
        let mut t = add_partitions_to_txn_response::AddPartitionsToTxnTopicResult::default();
        t.name = name;
        t.results_by_partition = partitions
            .into_iter()
            .map(|i| {
                let mut p = add_partitions_to_txn_response::AddPartitionsToTxnPartitionResult::default();
                p.partition_index = i;
                p.partition_error_code = error;
                p
            })
            .collect();
        t
    };
    for t in r.v3_and_below_topics {
        resp.results_by_topic_v3_and_below.push(result(t.name, t.partitions, 55));
    }
    for (name, partitions, error) in denied {
        resp.results_by_topic_v3_and_below.push(result(name, partitions, error));
    }
    answer(ResponseKind::AddPartitionsToTxn(resp))
}
