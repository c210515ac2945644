//! The shard's side of consumer groups: the requests for the groups it coordinates (the
//! groups whose partition of the offsets topic it owns), and commits of their offsets to
//! that topic.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;

use sluice_io::{BatchMeta, Offset, PartitionId, Record};

use super::partition::append;
use super::request::Request;
use super::{ShardState, partition};
use crate::error::Result;
use crate::group::assignor::MemberId;
use crate::group::offsets;
use crate::record::OwnedRecord;

/// Serves a group request; hands any other request back.
pub(super) async fn serve(state: &Rc<RefCell<ShardState>>, request: Request) -> Option<Request> {
    match request {
        Request::GroupJoin { group, req, partitions, reply } => {
            let result = state.borrow_mut().groups.join(&group, req, partitions, Instant::now());
            let _ = reply.send(result).await;
        }
        Request::GroupSync { group, member, generation, reply } => {
            let result = state.borrow_mut().groups.sync(&group, &member, generation, Instant::now());
            let _ = reply.send(result).await;
        }
        Request::GroupHeartbeat { group, member, partitions, reply } => {
            let result = state.borrow_mut().groups.heartbeat(&group, &member, partitions, Instant::now());
            let _ = reply.send(result).await;
        }
        Request::GroupLeave { group, member, reply } => {
            let result = state.borrow_mut().groups.leave(&group, &member);
            let _ = reply.send(result).await;
        }
        Request::GroupCommit { group, member, offsets_partition, offsets, reply } => {
            let result = commit(state, &group, member, offsets_partition, offsets).await;
            let _ = reply.send(result).await;
        }
        Request::GroupOffsets { group, reply } => {
            let committed = state.borrow().committed.get(&group).cloned().unwrap_or_default();
            let _ = reply.send(Ok(committed)).await;
        }
        Request::GroupDescribe { group, reply } => {
            let described = state.borrow().groups.describe(&group);
            let _ = reply.send(Ok(described)).await;
        }
        Request::GroupList { reply } => {
            let mut groups: Vec<String> = {
                let st = state.borrow();
                st.groups.groups().map(str::to_string).chain(st.committed.keys().cloned()).collect()
            };
            groups.sort();
            groups.dedup();
            let _ = reply.send(Ok(groups)).await;
        }
        other => return Some(other),
    }
    None
}

/// Checks a commit against the group's generation, appends it to the offsets topic (as
/// durable as that topic's policy: `always`), then makes it visible.
async fn commit(
    state: &Rc<RefCell<ShardState>>,
    group: &str,
    member: Option<(MemberId, u32)>,
    offsets_partition: PartitionId,
    offsets: Vec<(String, PartitionId, Offset)>,
) -> Result<()> {
    state.borrow().groups.check_commit(group, member.as_ref().map(|(m, g)| (m, *g)))?;
    let part = partition(state, offsets::TOPIC, offsets_partition)?;
    let records = offsets::records(group, &offsets);
    let mut headers = Vec::new();
    let recs: Vec<Record<'_>> = OwnedRecord::as_records(&records, &mut headers);
    append(&part, offsets::TOPIC, offsets_partition, &recs, &BatchMeta::default()).await?;
    let mut st = state.borrow_mut();
    let committed = st.committed.entry(group.to_string()).or_default();
    for (topic, p, offset) in offsets {
        committed.insert((topic, p), offset);
    }
    Ok(())
}
