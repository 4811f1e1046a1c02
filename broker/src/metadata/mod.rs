//! Cluster metadata: records, the applied image, and the store that makes changes durable
//! and publishes each new image.
//!
//! Every change goes through [`MetadataStore::commit`], which decides (against the current
//! image), appends the resulting records durably, applies them and publishes the new image,
//! all under one lock so that decisions never race. On a single node the records go to a
//! local journal; the Raft quorum replaces the journal without changing this interface.

pub mod image;
pub mod journal;
pub mod records;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::watch;

use crate::controller::ApiError;
use image::MetadataImage;
use journal::{JournalError, MetadataJournal};
use records::MetadataRecord;

/// Directory of the metadata log inside the data dir (KRaft's name for it).
pub const METADATA_LOG_DIR: &str = "__cluster_metadata-0";
/// On-disk format version of the data dir; bumped when the layout changes incompatibly.
pub const DATA_DIR_VERSION: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error("{path}: {source}; check that the data directory exists and is writable")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("data directory {path} belongs to node {found}, not node {expected}; pass --node-id {found} or use another --data-dir")]
    NodeIdMismatch { path: PathBuf, found: i32, expected: i32 },
    #[error("data directory {path} has format version {found}; this build reads version {DATA_DIR_VERSION}. Use a matching sluice build or a fresh --data-dir")]
    VersionMismatch { path: PathBuf, found: u32 },
    #[error("{path} is unreadable ({reason}); restore it or start with a fresh --data-dir")]
    BadProperties { path: PathBuf, reason: String },
}

/// Why a change was not committed.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error("{}", .0.message)]
    Refused(ApiError),
    #[error("the metadata change could not be made durable: {0}")]
    Storage(#[from] JournalError),
}

struct Inner {
    journal: MetadataJournal,
    image: Arc<MetadataImage>,
}

pub struct MetadataStore {
    inner: Mutex<Inner>,
    published: watch::Sender<Arc<MetadataImage>>,
}

impl MetadataStore {
    /// Opens the data dir's identity (`meta.properties`) and replays the metadata log.
    pub fn open(data_dir: &Path, node_id: i32) -> Result<MetadataStore, MetadataError> {
        let cluster_id = load_or_create_identity(data_dir, node_id)?;
        let (journal, replayed) = MetadataJournal::open(&data_dir.join(METADATA_LOG_DIR))?;
        let mut image = MetadataImage::new(cluster_id);
        for record in &replayed {
            image.apply(record);
        }
        tracing::info!(records = replayed.len(), topics = image.topics.len(), "metadata log replayed");
        let image = Arc::new(image);
        let (published, _) = watch::channel(image.clone());
        Ok(MetadataStore { inner: Mutex::new(Inner { journal, image }), published })
    }

    /// The current image; cheap (an `Arc` clone).
    pub fn image(&self) -> Arc<MetadataImage> {
        self.published.borrow().clone()
    }

    pub fn subscribe(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.published.subscribe()
    }

    /// Decides a change against the current image and, unless refused, makes it durable and
    /// publishes the new image. `decide` returns the records plus a value for the caller.
    pub fn commit<T>(
        &self,
        decide: impl FnOnce(&MetadataImage) -> Result<(Vec<MetadataRecord>, T), ApiError>,
    ) -> Result<(Arc<MetadataImage>, T), CommitError> {
        let mut inner = self.inner.lock();
        let (records, value) = decide(&inner.image).map_err(CommitError::Refused)?;
        if records.is_empty() {
            return Ok((inner.image.clone(), value));
        }
        inner.journal.append(&records)?;
        let mut next = MetadataImage::clone(&inner.image);
        for record in &records {
            next.apply(record);
        }
        let next = Arc::new(next);
        inner.image = next.clone();
        self.published.send_replace(next.clone());
        Ok((next, value))
    }
}

/// Reads `meta.properties` (Kafka's file of the same name), or writes a new one with a fresh
/// cluster id. Returns the cluster id.
fn load_or_create_identity(data_dir: &Path, node_id: i32) -> Result<String, MetadataError> {
    let path = data_dir.join("meta.properties");
    let io = |source| MetadataError::Io { path: path.clone(), source };
    std::fs::create_dir_all(data_dir).map_err(|source| MetadataError::Io { path: data_dir.to_path_buf(), source })?;
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let get = |key: &str| {
                text.lines()
                    .filter_map(|l| l.split_once('='))
                    .find(|(k, _)| k.trim() == key)
                    .map(|(_, v)| v.trim().to_string())
            };
            let bad = |reason: &str| MetadataError::BadProperties { path: path.clone(), reason: reason.to_string() };
            let version: u32 = get("version").and_then(|v| v.parse().ok()).ok_or_else(|| bad("no version"))?;
            if version != DATA_DIR_VERSION {
                return Err(MetadataError::VersionMismatch { path, found: version });
            }
            let found: i32 = get("node.id").and_then(|v| v.parse().ok()).ok_or_else(|| bad("no node.id"))?;
            if found != node_id {
                return Err(MetadataError::NodeIdMismatch { path, found, expected: node_id });
            }
            get("cluster.id").filter(|c| !c.is_empty()).ok_or_else(|| bad("no cluster.id"))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let cluster_id = new_cluster_id();
            let text = format!(
                "# Written by sluice; identifies this data directory.\nversion={DATA_DIR_VERSION}\nnode.id={node_id}\ncluster.id={cluster_id}\n"
            );
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, text).map_err(io)?;
            std::fs::rename(&tmp, &path).map_err(io)?;
            Ok(cluster_id)
        }
        Err(e) => Err(io(e)),
    }
}

/// A Kafka-style cluster id: a random UUID in URL-safe base64 without padding (22 chars).
fn new_cluster_id() -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let value = uuid::Uuid::new_v4().as_u128();
    (0..22).map(|i| ALPHABET[((value >> (6 * i)) & 63) as usize] as char).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::ApiError;
    use kafka_protocol::error::ResponseError;

    fn topic(name: &str) -> MetadataRecord {
        MetadataRecord::Topic { name: name.into(), topic_id: uuid::Uuid::new_v4() }
    }

    #[test]
    fn committed_changes_survive_reopen_with_the_same_cluster_id() {
        let dir = tempfile::tempdir().unwrap();
        let store = MetadataStore::open(dir.path(), 1).unwrap();
        let cluster_id = store.image().cluster_id.clone();
        assert_eq!(cluster_id.len(), 22);
        store.commit(|_| Ok((vec![topic("a")], ()))).unwrap();
        drop(store);
        let store = MetadataStore::open(dir.path(), 1).unwrap();
        assert_eq!(store.image().cluster_id, cluster_id);
        assert!(store.image().topic("a").is_some());
    }

    #[test]
    fn refused_changes_write_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = MetadataStore::open(dir.path(), 1).unwrap();
        let err = store
            .commit::<()>(|_| Err(ApiError::new(ResponseError::InvalidConfig, "no")))
            .unwrap_err();
        assert!(matches!(err, CommitError::Refused(_)));
        assert_eq!(store.image().last_offset, 0);
    }

    #[test]
    fn data_dir_of_another_node_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        drop(MetadataStore::open(dir.path(), 1).unwrap());
        let err = MetadataStore::open(dir.path(), 2).err().unwrap();
        assert!(matches!(err, MetadataError::NodeIdMismatch { found: 1, expected: 2, .. }));
        assert!(err.to_string().contains("--node-id 1"));
    }
}
