//! Consumer groups: the [`coordinator`] (members, generations, assignments; a pure state
//! machine that lives on the shard owning the group's partition of the offsets topic),
//! the partition [`assignor`]s it runs, and the groups' committed [`offsets`] in the
//! compacted internal topic `__consumer_offsets`. The clients that join groups are in
//! `client/`; the shard serves group requests in `shard/groups.rs`.

pub mod assignor;
pub mod coordinator;
pub mod offsets;
