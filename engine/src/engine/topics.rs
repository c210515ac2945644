//! Topic administration through the handle: create, list, describe, delete, add
//! partitions, and change a topic's settings. Metadata changes are serialized by the
//! handle's admin lock and stored before the shards open, close or reconfigure partitions.

use sluice_io::{CleanReport, PartitionId};

use crate::config::{CompressionType, TopicConfig};
use crate::error::{EngineError, Result};
use crate::shard::{CleanerStats, Request};
use crate::topic::meta::{TopicId, TopicMeta, assign_shards};
use crate::topic::names::validate_name;

use super::{EngineHandle, TopicDescription, is_internal};

/// The most partitions a topic may have.
pub const PARTITIONS_MAX: u32 = 10_000;

impl EngineHandle {
    /// Creates a topic with `partitions` partitions and the given settings (the engine's
    /// defaults when `None`).
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: u32,
        config: Option<TopicConfig>,
    ) -> Result<TopicDescription> {
        validate_name("topic", name)?;
        if partitions == 0 || partitions > PARTITIONS_MAX {
            return Err(EngineError::InvalidPartitions(format!(
                "Number of partitions must be within 1..={PARTITIONS_MAX}, not {partitions}."
            )));
        }
        let config = config.unwrap_or_else(|| self.inner.topic_defaults.clone());
        config.log_config()?;
        let _admin = self.inner.admin.acquire().await;
        let topic = TopicMeta::new(config, assign_shards(name, 0, partitions, self.inner.shards.len()));
        {
            let mut meta = self.inner.meta.write().unwrap_or_else(|e| e.into_inner());
            if meta.topics.contains_key(name) {
                return Err(EngineError::TopicExists(name.to_string()));
            }
            let mut next = meta.clone();
            next.topics.insert(name.to_string(), topic.clone());
            next.store(&self.inner.layout)?;
            *meta = next;
        }
        self.open_partitions(name, &topic, 0).await?;
        Ok(TopicDescription::of(name, topic))
    }

    /// Applies retention and compaction to every partition of a topic now, whatever the
    /// dirty ratio (the cleaner does this on its own every `retention_check`). Internal
    /// topics may be named too.
    pub async fn clean_topic(&self, name: &str) -> Result<Vec<(PartitionId, CleanReport)>> {
        let t = self.topic(name)?;
        let mut reports = Vec::with_capacity(t.shards.len());
        for (p, &shard) in PartitionId::all(t.partitions()).zip(&t.shards) {
            let topic = name.to_string();
            reports.push((p, self.call(shard, |reply| Request::Clean { topic, partition: p, reply }).await?));
        }
        Ok(reports)
    }

    /// What each shard's cleaner has done since the engine started, by shard.
    pub async fn cleaner_stats(&self) -> Result<Vec<CleanerStats>> {
        let mut all = Vec::with_capacity(self.inner.shards.len());
        for shard in 0..self.inner.shards.len() as u32 {
            all.push(self.call(shard, |reply| Request::CleanerStats { reply }).await?);
        }
        Ok(all)
    }

    /// How often each shard applies retention, compaction and time-based rolls
    /// (`EngineConfig::retention_check`).
    #[must_use]
    pub fn retention_check(&self) -> std::time::Duration {
        self.inner.retention_check
    }

    /// Segment size of the internal topics when they are created.
    pub(crate) fn internal_segment_bytes(&self) -> u64 {
        self.inner.internal_segment_bytes
    }

    /// The topics, by name, without internal ones (`__consumer_offsets`, `__transaction_state`).
    #[must_use]
    pub fn list_topics(&self) -> Vec<String> {
        let meta = self.inner.meta.read().unwrap_or_else(|e| e.into_inner());
        meta.topics.keys().filter(|t| !is_internal(t)).cloned().collect()
    }

    /// A topic's settings and partitions.
    pub fn describe_topic(&self, name: &str) -> Result<TopicDescription> {
        let t = self.topic(name)?;
        Ok(TopicDescription::of(name, t))
    }

    /// The name of the topic with this id, if there is one (Kafka clients name topics by
    /// id in newer requests). A scan of the topics: there are few, and a listener asks
    /// once per topic of a request.
    #[must_use]
    pub fn topic_name(&self, id: TopicId) -> Option<String> {
        let meta = self.inner.meta.read().unwrap_or_else(|e| e.into_inner());
        meta.name_of(id).map(str::to_string)
    }

    /// A topic's id, if it exists.
    #[must_use]
    pub fn topic_id(&self, name: &str) -> Option<TopicId> {
        let meta = self.inner.meta.read().unwrap_or_else(|e| e.into_inner());
        meta.topics.get(name).map(|t| t.id)
    }

    /// A topic's `compression.type` and the most bytes of records one of its batches may
    /// hold (read under the metadata lock, nothing cloned: the Kafka listener asks on
    /// every produce and fetch).
    pub(crate) fn batch_settings(&self, name: &str) -> Result<(CompressionType, usize)> {
        let meta = self.inner.meta.read().unwrap_or_else(|e| e.into_inner());
        let t = meta.topics.get(name).ok_or_else(|| EngineError::UnknownTopic(name.to_string()))?;
        Ok((t.config.compression, t.config.max_batch_bytes()))
    }

    /// Deletes a topic and its data.
    pub async fn delete_topic(&self, name: &str) -> Result<()> {
        if is_internal(name) {
            return Err(EngineError::InvalidConfig(format!("{name} is internal and cannot be deleted")));
        }
        let _admin = self.inner.admin.acquire().await;
        let topic = self.topic(name)?;
        {
            let mut meta = self.inner.meta.write().unwrap_or_else(|e| e.into_inner());
            let mut next = meta.clone();
            next.topics.remove(name);
            next.store(&self.inner.layout)?;
            *meta = next;
        }
        for (p, &shard) in topic.shards.iter().enumerate() {
            let topic_name = name.to_string();
            self.call(shard, |reply| Request::Delete { topic: topic_name, partition: PartitionId(p as u32), reply })
                .await?;
        }
        Ok(())
    }

    /// Grows a topic to `partitions` partitions (never shrinks, as in Kafka): the new ones
    /// are placed on shards as creation places them, created empty, and keys hash over
    /// the new count from then on. Internal topics keep their count (a group's coordinator
    /// is chosen by hashing over it).
    pub async fn add_partitions(&self, name: &str, partitions: u32) -> Result<TopicDescription> {
        let _admin = self.inner.admin.acquire().await;
        let mut topic = self.topic(name)?;
        Self::check_growth(name, &topic, partitions)?;
        let have = topic.partitions();
        topic.shards.extend(assign_shards(name, have, partitions - have, self.inner.shards.len()));
        {
            let mut meta = self.inner.meta.write().unwrap_or_else(|e| e.into_inner());
            let mut next = meta.clone();
            next.topics.insert(name.to_string(), topic.clone());
            next.store(&self.inner.layout)?;
            *meta = next;
        }
        self.open_partitions(name, &topic, have).await?;
        Ok(TopicDescription::of(name, topic))
    }

    /// Whether [`add_partitions`](Self::add_partitions) would grow `name` to `partitions`
    /// (Kafka's `validate_only`); the error it would give otherwise.
    pub fn check_add_partitions(&self, name: &str, partitions: u32) -> Result<()> {
        Self::check_growth(name, &self.topic(name)?, partitions)
    }

    fn check_growth(name: &str, topic: &TopicMeta, partitions: u32) -> Result<()> {
        let have = topic.partitions();
        if is_internal(name) {
            return Err(EngineError::InvalidPartitions(format!(
                "Topic {name} is internal: its partition count stays {have}."
            )));
        }
        if partitions < have {
            return Err(EngineError::InvalidPartitions(format!(
                "Topic currently has {have} partitions, which is higher than the requested {partitions}."
            )));
        }
        if partitions == have {
            return Err(EngineError::InvalidPartitions(format!("Topic already has {have} partitions.")));
        }
        if partitions > PARTITIONS_MAX {
            return Err(EngineError::InvalidPartitions(format!(
                "Number of partitions must be at most {PARTITIONS_MAX}, not {partitions}."
            )));
        }
        Ok(())
    }

    /// The settings a topic gets when it is created without its own.
    #[must_use]
    pub fn topic_defaults(&self) -> TopicConfig {
        self.inner.topic_defaults.clone()
    }

    /// Changes a topic's settings to what `change` makes of its current ones (run under
    /// the admin lock, so two changes never overwrite each other), checked first: nothing
    /// changes if `change` or the check refuses. Then the new settings are stored in the
    /// metadata and every partition uses them at once on its shard: retention and
    /// compaction settings at the cleaner's next pass, the segment size at the next roll
    /// check, the record size limit at the next send, the fsync policy in the log. With
    /// `validate_only`, only checks. Internal topics keep their settings.
    pub async fn alter_topic_config(
        &self,
        name: &str,
        change: impl FnOnce(&TopicConfig) -> Result<TopicConfig>,
        validate_only: bool,
    ) -> Result<TopicDescription> {
        let _admin = self.inner.admin.acquire().await;
        let mut topic = self.topic(name)?;
        if is_internal(name) {
            return Err(EngineError::InvalidConfig(format!("{name} is internal: its settings are sluice's")));
        }
        topic.config = change(&topic.config)?;
        let log_config = topic.config.log_config()?;
        if validate_only {
            return Ok(TopicDescription::of(name, topic));
        }
        {
            let mut meta = self.inner.meta.write().unwrap_or_else(|e| e.into_inner());
            let mut next = meta.clone();
            next.topics.insert(name.to_string(), topic.clone());
            next.store(&self.inner.layout)?;
            *meta = next;
        }
        // Every partition is told, even past one that fails (a shard shutting down); the
        // first failure is the answer, and the stored settings apply on the next open.
        let batching = Self::batching(&topic.config);
        let mut first_error = None;
        for (p, &shard) in PartitionId::all(topic.partitions()).zip(&topic.shards) {
            let (topic, config) = (name.to_string(), log_config.clone());
            let told = self.call(shard, |reply| Request::Reconfigure { topic, partition: p, config, batching, reply });
            if let Err(e) = told.await {
                first_error.get_or_insert(e);
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        Ok(TopicDescription::of(name, topic))
    }
}
