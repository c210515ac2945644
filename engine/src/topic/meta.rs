//! Topic metadata: each topic's configuration, partition count, and the shard that owns
//! each partition. Persisted as one JSON file in the data directory, replaced atomically
//! (write a temporary file, fsync, rename, fsync the directory), so a crash leaves the
//! old or the new metadata, never a mix.
//!
//! Lives outside the shards: admin operations are rare and go through the handle, which
//! holds the metadata behind a lock. The data path reads it only to route a send.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use sluice_io::PartitionId;

use crate::config::TopicConfig;
use crate::error::{EngineError, Result};

/// What the engine knows of one topic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicMeta {
    /// The topic's settings.
    pub config: TopicConfig,
    /// The shard that owns each partition, by partition number.
    pub shards: Vec<u32>,
}

impl TopicMeta {
    /// The number of partitions.
    #[must_use]
    pub fn partitions(&self) -> u32 {
        self.shards.len() as u32
    }
}

/// All topics.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metadata {
    /// Format version of this file.
    pub version: u32,
    /// Topics by name.
    pub topics: BTreeMap<String, TopicMeta>,
    /// The first idempotent producer id not yet handed out.
    #[serde(default)]
    pub next_producer_id: i64,
}

const VERSION: u32 = 1;

/// Where the metadata and the partitions live under a data directory.
#[derive(Clone, Debug)]
pub struct Layout {
    /// The data directory.
    pub data_dir: PathBuf,
}

impl Layout {
    /// The metadata file.
    #[must_use]
    pub fn meta_file(&self) -> PathBuf {
        self.data_dir.join("meta").join("topics.json")
    }

    /// The lock file.
    #[must_use]
    pub fn lock_file(&self) -> PathBuf {
        self.data_dir.join("sluice.lock")
    }

    /// A partition's directory. `topic` must be a validated name.
    #[must_use]
    pub fn partition_dir(&self, topic: &str, partition: PartitionId) -> PathBuf {
        self.data_dir.join("topics").join(format!("{topic}-{partition}"))
    }
}

impl Metadata {
    /// Reads the metadata file, or returns empty metadata if there is none.
    pub fn load(layout: &Layout) -> Result<Metadata> {
        let path = layout.meta_file();
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Metadata { version: VERSION, ..Metadata::default() });
            }
            Err(source) => return Err(EngineError::Io { op: "reading", path, source }),
        };
        let meta: Metadata = serde_json::from_str(&text)
            .map_err(|e| EngineError::InvalidConfig(format!("metadata file {} is damaged: {e}", path.display())))?;
        if meta.version != VERSION {
            return Err(EngineError::InvalidConfig(format!(
                "metadata file {} has version {}, this build reads {VERSION}",
                path.display(),
                meta.version
            )));
        }
        for name in meta.topics.keys() {
            crate::topic::names::validate_name("topic", name)?;
        }
        Ok(meta)
    }

    /// Writes the metadata file atomically and durably.
    pub fn store(&self, layout: &Layout) -> Result<()> {
        let path = layout.meta_file();
        let dir = path.parent().expect("the metadata file is in a directory");
        let io = |op: &'static str, p: &Path| {
            let path = p.to_path_buf();
            move |source| EngineError::Io { op, path, source }
        };
        std::fs::create_dir_all(dir).map_err(io("creating", dir))?;
        let tmp = path.with_extension("json.tmp");
        let text = serde_json::to_vec_pretty(self).expect("metadata serializes");
        let mut file = std::fs::File::create(&tmp).map_err(io("creating", &tmp))?;
        file.write_all(&text).map_err(io("writing", &tmp))?;
        file.sync_all().map_err(io("syncing", &tmp))?;
        std::fs::rename(&tmp, &path).map_err(io("renaming", &tmp))?;
        std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io("syncing", dir))?;
        Ok(())
    }
}

/// Picks a shard for each new partition: round robin from a start that depends on the
/// topic's name, so that the first partitions of many topics do not all land on shard 0.
#[must_use]
pub fn assign_shards(topic: &str, first_partition: u32, count: u32, shards: usize) -> Vec<u32> {
    let start = crate::topic::partitioner::murmur2(topic.as_bytes()) as u32 & 0x7fff_ffff;
    (first_partition..first_partition + count).map(|p| ((start as u64 + p as u64) % shards as u64) as u32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_round_trips_and_refuses_damage() {
        let dir = std::env::temp_dir().join(format!("sluice-meta-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let layout = Layout { data_dir: dir.clone() };
        assert_eq!(Metadata::load(&layout).unwrap().topics.len(), 0);
        let mut meta = Metadata { version: VERSION, ..Metadata::default() };
        meta.topics.insert("orders".into(), TopicMeta { config: TopicConfig::default(), shards: vec![0, 1, 0] });
        meta.store(&layout).unwrap();
        assert_eq!(Metadata::load(&layout).unwrap(), meta);
        std::fs::write(layout.meta_file(), b"{ not json").unwrap();
        assert!(matches!(Metadata::load(&layout), Err(EngineError::InvalidConfig(_))));
        std::fs::write(layout.meta_file(), br#"{"version":1,"topics":{"../x":{"config":{}, "shards":[]}}}"#).unwrap();
        assert!(Metadata::load(&layout).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn shard_assignment_spreads_and_is_stable() {
        let a = assign_shards("orders", 0, 6, 2);
        assert_eq!(a, assign_shards("orders", 0, 6, 2));
        assert_eq!(a.iter().filter(|&&s| s == 0).count(), 3);
        // Added partitions continue the same sequence.
        assert_eq!(assign_shards("orders", 6, 2, 2), vec![a[0], a[1]]);
    }
}
