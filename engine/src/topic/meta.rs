//! Topic metadata: each topic's configuration, partition count, and the shard that owns
//! each partition. Persisted as one JSON file in the data directory, replaced atomically
//! (write a temporary file, fsync, rename, fsync the directory), so a crash leaves the
//! old or the new metadata, never a mix.
//!
//! Every topic has a [`TopicId`], a random v4 UUID given at creation (Kafka's topic id),
//! stored with it: a topic deleted and created again under the same name gets a new one,
//! so a client holding the old id learns it is gone. Topics from a metadata file written
//! before ids existed get theirs when the engine first opens it, stored then.
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

/// A topic's id: a random (v4) UUID, never the zero UUID, which Kafka reserves for
/// "no id". Stored in the metadata file in its hyphenated text form.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicId(pub uuid::Uuid);

impl TopicId {
    /// The id that names no topic (a topic read from a metadata file older than ids has
    /// it until the engine gives it one).
    pub const NONE: TopicId = TopicId(uuid::Uuid::nil());

    /// A fresh random id (never [`TopicId::NONE`]: a v4 UUID has version bits set).
    #[must_use]
    pub fn random() -> TopicId {
        TopicId(uuid::Uuid::new_v4())
    }

    /// Whether this is [`TopicId::NONE`].
    #[must_use]
    pub fn is_none(&self) -> bool {
        self.0.is_nil()
    }
}

impl std::fmt::Display for TopicId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

impl Serialize for TopicId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TopicId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        uuid::Uuid::parse_str(&text).map(TopicId).map_err(serde::de::Error::custom)
    }
}

/// What the engine knows of one topic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicMeta {
    /// The topic's id ([`TopicId::NONE`] only between reading an older file and the
    /// engine's open, which gives every topic one).
    #[serde(default)]
    pub id: TopicId,
    /// The topic's settings.
    pub config: TopicConfig,
    /// The shard that owns each partition, by partition number.
    pub shards: Vec<u32>,
}

impl TopicMeta {
    /// A new topic's metadata, with a fresh id.
    #[must_use]
    pub fn new(config: TopicConfig, shards: Vec<u32>) -> TopicMeta {
        TopicMeta { id: TopicId::random(), config, shards }
    }

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

    /// Gives every topic without an id (one from a file older than ids) a fresh one.
    /// Returns whether any was given, and so whether the metadata must be stored.
    pub fn assign_missing_ids(&mut self) -> bool {
        let mut given = false;
        for topic in self.topics.values_mut().filter(|t| t.id.is_none()) {
            topic.id = TopicId::random();
            given = true;
        }
        given
    }

    /// The name of the topic with this id.
    #[must_use]
    pub fn name_of(&self, id: TopicId) -> Option<&str> {
        if id.is_none() {
            return None;
        }
        self.topics.iter().find(|(_, t)| t.id == id).map(|(name, _)| name.as_str())
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
        meta.topics.insert("orders".into(), TopicMeta::new(TopicConfig::default(), vec![0, 1, 0]));
        meta.store(&layout).unwrap();
        assert_eq!(Metadata::load(&layout).unwrap(), meta);
        std::fs::write(layout.meta_file(), b"{ not json").unwrap();
        assert!(matches!(Metadata::load(&layout), Err(EngineError::InvalidConfig(_))));
        std::fs::write(layout.meta_file(), br#"{"version":1,"topics":{"../x":{"config":{}, "shards":[]}}}"#).unwrap();
        assert!(Metadata::load(&layout).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn topics_from_before_ids_get_one_once() {
        let dir = std::env::temp_dir().join(format!("sluice-meta-ids-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let layout = Layout { data_dir: dir.clone() };
        // A file as a build before topic ids wrote it: the same, without the ids.
        let mut old = Metadata { version: VERSION, ..Metadata::default() };
        old.topics.insert("a".into(), TopicMeta::new(TopicConfig::default(), vec![0]));
        old.topics.insert("b".into(), TopicMeta::new(TopicConfig::default(), vec![0, 0]));
        let mut json = serde_json::to_value(&old).unwrap();
        for t in json["topics"].as_object_mut().unwrap().values_mut() {
            t.as_object_mut().unwrap().remove("id").expect("an id was written");
        }
        std::fs::create_dir_all(dir.join("meta")).unwrap();
        std::fs::write(layout.meta_file(), serde_json::to_vec(&json).unwrap()).unwrap();
        let mut meta = Metadata::load(&layout).unwrap();
        assert!(meta.topics.values().all(|t| t.id.is_none()));
        assert!(meta.assign_missing_ids());
        assert!(!meta.assign_missing_ids(), "ids are given once");
        let (a, b) = (meta.topics["a"].id, meta.topics["b"].id);
        assert!(!a.is_none() && !b.is_none() && a != b);
        assert_eq!(a.0.get_version_num(), 4);
        meta.store(&layout).unwrap();
        let again = Metadata::load(&layout).unwrap();
        assert_eq!((again.topics["a"].id, again.topics["b"].id), (a, b));
        assert_eq!(again.name_of(b), Some("b"));
        assert_eq!(again.name_of(TopicId::random()), None);
        assert_eq!(again.name_of(TopicId::NONE), None);
        let mut json = serde_json::to_value(&again).unwrap();
        json["topics"]["a"]["id"] = "zz".into();
        std::fs::write(layout.meta_file(), serde_json::to_vec(&json).unwrap()).unwrap();
        assert!(Metadata::load(&layout).is_err(), "a damaged id is refused");
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
