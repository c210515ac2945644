//! The checkpoint store on a real disk (io_uring, O_DIRECT) and through `FaultyStorage`:
//! parts and manifests round trip; the last K checkpoints are kept and chains are never
//! cut; a crash before the manifest, a damaged part, a damaged manifest, a torn manifest
//! write, a failed fsync and a full disk each leave the previous checkpoint as the latest
//! valid one, with the reason reported.

mod common;

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use common::{Rng, run, seed, temp_dir};
use sluice_io::checkpoint::{checkpoint_dir, part_path};
use sluice_io::{CheckpointId, CheckpointStore, FaultyStorage, LogError, Manifest, PartInfo, Storage, UringStorage};

fn bytes(rng: &mut Rng, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

/// Begins a checkpoint, writes `parts` (name, base, body), commits it with `metadata`.
async fn checkpoint<S: Storage>(
    store: &mut CheckpointStore<S>,
    parts: &[(&str, Option<CheckpointId>, &[u8])],
    metadata: &[u8],
) -> Manifest {
    let id = store.begin().await.expect("begin");
    let mut infos = Vec::new();
    for &(name, base, body) in parts {
        infos.push(store.write_part(id, name, base, body).await.expect("write part"));
    }
    let manifest = Manifest::new(id, infos, metadata.to_vec());
    store.commit(&manifest).await.expect("commit");
    manifest
}

/// The ids of the checkpoint directories on disk, oldest first.
fn dirs_on_disk(root: &Path) -> Vec<u64> {
    let mut ids: Vec<u64> = std::fs::read_dir(root)
        .expect("read root")
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_prefix("chk-")?.parse().ok())
        .collect();
    ids.sort_unstable();
    ids
}

/// Flips one byte of a file behind the store's back, as bit rot would.
fn flip_byte(path: &Path, pos: u64) {
    let mut f = std::fs::OpenOptions::new().read(true).write(true).open(path).expect("open for damage");
    let mut b = [0u8];
    f.seek(SeekFrom::Start(pos)).and_then(|_| f.read_exact(&mut b)).expect("read byte");
    f.seek(SeekFrom::Start(pos)).and_then(|_| f.write_all(&[b[0] ^ 0x5a])).expect("write byte");
    f.sync_all().expect("sync damage");
}

fn manifest_path(root: &Path, id: CheckpointId) -> PathBuf {
    checkpoint_dir(root, id).join("MANIFEST")
}

/// Asserts the latest valid checkpoint is `want` and returns what was skipped.
async fn latest_is<S: Storage>(store: &CheckpointStore<S>, want: &Manifest) -> Vec<(CheckpointId, LogError)> {
    let found = store.latest_valid().await.expect("latest_valid");
    assert_eq!(found.latest.as_ref().map(|(id, _)| *id), Some(want.id), "skipped: {:?}", found.skipped);
    assert_eq!(found.latest.map(|(_, m)| m).as_ref(), Some(want));
    found.skipped.into_iter().map(|s| (s.id, s.error)).collect()
}

#[test]
fn checkpoint_parts_and_manifest_round_trip() {
    let seed = seed("checkpoint_parts_and_manifest_round_trip");
    let root = temp_dir("chk-round-trip");
    run(move || async move {
        let mut rng = Rng::new(seed);
        // Empty, tiny, around the 512-byte sector and the 1 MiB write chunk, and larger.
        let sizes = [0, 1, 31, 480, 481, 4064, 4065, (1 << 20) - 32, (1 << 20) + 4097, (3 << 20) + 5];
        let bodies: Vec<Vec<u8>> = sizes.iter().map(|&n| bytes(&mut rng, n)).collect();
        let names: Vec<String> = (0..sizes.len()).map(|i| format!("shard-{i}")).collect();
        let parts: Vec<_> = names.iter().zip(&bodies).map(|(n, b)| (n.as_str(), None, b.as_slice())).collect();
        let mut store = CheckpointStore::open(UringStorage, &root, 3).await.unwrap();
        assert_eq!(store.next_id(), CheckpointId::FIRST);
        let m = checkpoint(&mut store, &parts, b"source offsets").await;
        for (info, body) in m.parts.iter().zip(&bodies) {
            assert_eq!(store.read_part(m.id, info).await.unwrap().as_slice(), body.as_slice(), "part {}", info.name);
            let on_disk = std::fs::metadata(part_path(&root, m.id, &info.name)).unwrap().len();
            assert_eq!(on_disk, 32 + body.len() as u64, "a part is its header and body, no padding");
        }
        drop(store);

        let store = CheckpointStore::open(UringStorage, &root, 3).await.unwrap();
        assert_eq!(store.open_report().completed, vec![m.id]);
        assert_eq!(store.next_id(), m.id.next());
        assert!(latest_is(&store, &m).await.is_empty());
        for (info, body) in m.parts.iter().zip(&bodies) {
            assert_eq!(
                store.read_part(m.id, info).await.unwrap().as_slice(),
                body.as_slice(),
                "part {} after reopen",
                info.name
            );
        }
    });
}

#[test]
fn checkpoint_keep_k_prunes_but_never_cuts_a_chain() {
    let root = temp_dir("chk-keep-k");
    run(move || async move {
        let ids = |v: &[u64]| v.iter().map(|&i| CheckpointId(i)).collect::<Vec<_>>();
        let mut store = CheckpointStore::open(UringStorage, &root, 2).await.unwrap();
        for _ in 0..3 {
            checkpoint(&mut store, &[("s0", None, b"full")], b"").await;
        }
        assert_eq!(dirs_on_disk(&root), [2, 3], "only the last 2 are kept");
        // 4 is a delta on 3 and 5 a delta on 4: keeping 4 and 5 keeps 3 too.
        let m4 = checkpoint(&mut store, &[("s0", Some(CheckpointId(3)), b"d4")], b"").await;
        assert_eq!(dirs_on_disk(&root), [3, 4]);
        let m5 = checkpoint(&mut store, &[("s0", Some(m4.id), b"d5"), ("s1", None, b"f5")], b"").await;
        assert_eq!(dirs_on_disk(&root), [3, 4, 5], "3 is reached through 5 -> 4 -> 3");
        // A delta on a pruned checkpoint is refused, and changes nothing.
        let id = store.begin().await.unwrap();
        let stale = store.write_part(id, "s0", Some(CheckpointId(2)), b"d").await.unwrap();
        let err = store.commit(&Manifest::new(id, vec![stale], Vec::new())).await.unwrap_err();
        assert!(matches!(err, LogError::Checkpoint { id: i, .. } if i == id), "{err}");
        store.abort(id).await.unwrap();
        drop(store);

        // A reopened store learns the chains from the manifests on disk.
        let mut store = CheckpointStore::open(UringStorage, &root, 2).await.unwrap();
        assert_eq!(store.completed(), ids(&[3, 4, 5]));
        assert!(latest_is(&store, &m5).await.is_empty(), "5 and its whole chain verify");
        // The aborted 6 left nothing on disk, so after the restart its id is free again.
        let m6 = checkpoint(&mut store, &[("s0", None, b"consolidated")], b"").await;
        assert_eq!(m6.id, CheckpointId(6));
        assert_eq!(dirs_on_disk(&root), [3, 4, 5, 6], "kept 5 still needs 4 and 3");
        let id = store.begin().await.unwrap();
        let info = store.write_part(id, "s0", None, b"full again").await.unwrap();
        let report = store.commit(&Manifest::new(id, vec![info], Vec::new())).await.unwrap();
        assert_eq!(report.pruned, ids(&[3, 4, 5]), "no kept chain reaches the old one any more");
        assert!(report.cleanup_errors.is_empty());
        assert_eq!(dirs_on_disk(&root), [6, 7]);
    });
}

#[test]
fn checkpoint_crash_before_manifest_keeps_previous_and_cleans_up() {
    let root = temp_dir("chk-crash");
    run(move || async move {
        let mut store = CheckpointStore::open(UringStorage, &root, 3).await.unwrap();
        let m1 = checkpoint(&mut store, &[("s0", None, b"one"), ("s1", None, b"uno")], b"off=1").await;
        let id2 = store.begin().await.unwrap();
        store.write_part(id2, "s0", None, b"two").await.unwrap();
        store.write_part(id2, "s1", None, b"dos").await.unwrap();
        drop(store); // The process dies before the coordinator commits.

        let mut store = CheckpointStore::open(UringStorage, &root, 3).await.unwrap();
        assert_eq!(store.open_report().removed_incomplete, vec![id2]);
        assert!(!checkpoint_dir(&root, id2).exists(), "the partial directory is removed on open");
        assert!(latest_is(&store, &m1).await.is_empty(), "an incomplete checkpoint is no candidate");
        assert_eq!(store.begin().await.unwrap(), CheckpointId(3), "the id of the lost checkpoint is not reused");
    });
}

/// Damage to any byte of any part of the newest checkpoint (header or body; the byte is
/// seeded, `SEED=` replays) makes it unusable: the previous one is the latest valid and
/// the damage is reported with the part's path. Reading the part is a typed error.
#[test]
fn checkpoint_corrupted_part_falls_back_to_previous() {
    let seed = seed("checkpoint_corrupted_part_falls_back_to_previous");
    run(move || async move {
        let mut rng = Rng::new(seed);
        for round in 0..4 {
            let root = temp_dir("chk-bad-part");
            let mut store = CheckpointStore::open(UringStorage, &root, 3).await.unwrap();
            let (a, b) = (bytes(&mut rng, 5000), bytes(&mut rng, 70));
            let m1 = checkpoint(&mut store, &[("s0", None, &a), ("s1", None, &b)], b"1").await;
            let m2 = checkpoint(&mut store, &[("s0", None, &b), ("s1", None, &a)], b"2").await;
            let victim = &m2.parts[rng.range(0, 2) as usize];
            // Round 0 hits the header; the others anywhere in the file.
            let pos = if round == 0 { rng.range(0, 32) } else { rng.range(0, 32 + victim.len) };
            let path = part_path(&root, m2.id, &victim.name);
            flip_byte(&path, pos);

            let skipped = latest_is(&store, &m1).await;
            assert_eq!(skipped.len(), 1, "round {round}: {skipped:?}");
            assert_eq!(skipped[0].0, m2.id);
            assert!(matches!(&skipped[0].1, LogError::Corrupt { path: p, .. } if *p == path), "{}", skipped[0].1);
            let err = store.read_part(m2.id, victim).await.unwrap_err();
            assert!(err.is_corruption(), "round {round}, byte {pos}: {err}");
        }
    });
}

#[test]
fn checkpoint_corrupted_manifest_falls_back_to_previous() {
    let root = temp_dir("chk-bad-manifest");
    run(move || async move {
        let mut store = CheckpointStore::open(UringStorage, &root, 2).await.unwrap();
        let m1 = checkpoint(&mut store, &[("s0", None, b"one")], b"offsets 1").await;
        let m2 = checkpoint(&mut store, &[("s0", None, b"two")], b"offsets 2").await;
        flip_byte(&manifest_path(&root, m2.id), 20);
        let skipped = latest_is(&store, &m1).await;
        assert_eq!(skipped.len(), 1);
        let expected = manifest_path(&root, m2.id);
        assert!(matches!(&skipped[0], (id, LogError::Corrupt { path, .. }) if *id == m2.id && *path == expected));
        drop(store);

        // Reopened: the damaged manifest is reported, does not count as one of the K
        // kept, and the next commit prunes it while keeping 1.
        let mut store = CheckpointStore::open(UringStorage, &root, 2).await.unwrap();
        assert_eq!(store.open_report().unreadable_manifests.len(), 1);
        let m3 = checkpoint(&mut store, &[("s0", None, b"three")], b"").await;
        assert_eq!(dirs_on_disk(&root), [1, 3]);
        // A manifest cut short (a torn file from outside the store) is damage too.
        std::fs::OpenOptions::new().write(true).open(manifest_path(&root, m3.id)).unwrap().set_len(10).unwrap();
        let skipped = latest_is(&store, &m1).await;
        assert!(matches!(&skipped[..], [(id, e)] if *id == m3.id && e.is_corruption()), "{skipped:?}");
    });
}

/// A damaged checkpoint also makes every checkpoint whose chain needs it unusable.
#[test]
fn checkpoint_broken_chain_skips_its_dependents() {
    let root = temp_dir("chk-chain");
    run(move || async move {
        let mut store = CheckpointStore::open(UringStorage, &root, 3).await.unwrap();
        let m1 = checkpoint(&mut store, &[("s0", None, b"full one")], b"").await;
        let m2 = checkpoint(&mut store, &[("s0", None, b"full two")], b"").await;
        let m3 = checkpoint(&mut store, &[("s0", Some(m2.id), b"delta three")], b"").await;
        flip_byte(&part_path(&root, m2.id, "s0"), 35);
        let skipped = latest_is(&store, &m1).await;
        assert_eq!(skipped.iter().map(|s| s.0).collect::<Vec<_>>(), [m3.id, m2.id]);
        assert!(matches!(&skipped[0].1, LogError::Checkpoint { reason, .. } if reason.contains("needs checkpoint 2")));
        assert!(skipped[1].1.is_corruption());
    });
}

/// A write torn at a seeded byte anywhere in a checkpoint (a part or the manifest,
/// `SEED=` replays): the commit fails and the previous checkpoint stays the latest, or
/// the tear fell after the last write and the commit succeeded; never anything between.
/// After a reopen on the real backend the torn checkpoint's directory is gone.
#[test]
fn checkpoint_torn_write_keeps_previous() {
    let seed = seed("checkpoint_torn_write_keeps_previous");
    run(move || async move {
        let mut rng = Rng::new(seed);
        for round in 0..6 {
            let root = temp_dir("chk-torn");
            let storage = FaultyStorage::new();
            let mut store = CheckpointStore::open(storage.clone(), &root, 3).await.unwrap();
            let m1 = checkpoint(&mut store, &[("s0", None, b"one"), ("s1", None, b"uno")], b"1").await;
            // Checkpoint 1 wrote three one-block files (two parts, a manifest), and so
            // will 2: tear within 4 blocks of its start (past its end, nothing tears),
            // and in round 0 inside the manifest.
            let start = storage.plan().borrow().bytes_written;
            let block = start / 3;
            let tear = if round == 0 { start + 2 * block + 7 } else { start + rng.range(0, 4 * block) };
            storage.plan().borrow_mut().tear_at_byte = Some(tear);
            storage.plan().borrow_mut().tear_fill = 0xab;
            let id2 = store.begin().await.unwrap();
            let outcome = async {
                let a = store.write_part(id2, "s0", None, &[7; 300]).await?;
                let b = store.write_part(id2, "s1", None, &[8; 400]).await?;
                store.commit(&Manifest::new(id2, vec![a, b], b"2".to_vec())).await.map(|_| ())
            }
            .await;
            let crashed = storage.plan().borrow().crashed;
            assert_eq!(outcome.is_err(), crashed, "round {round}: tear at {tear}, outcome {outcome:?}");
            if round == 0 {
                assert!(crashed, "round 0 tears the manifest");
            }
            drop(store);

            let store = CheckpointStore::open(UringStorage, &root, 3).await.unwrap();
            let found = store.latest_valid().await.unwrap();
            assert!(found.skipped.is_empty(), "round {round}: {:?}", found.skipped);
            let latest = found.latest.map(|(id, _)| id);
            if crashed {
                assert_eq!(latest, Some(m1.id), "round {round}: the previous checkpoint stays the latest");
                assert_eq!(store.open_report().removed_incomplete, vec![id2]);
                assert!(!checkpoint_dir(&root, id2).exists());
            } else {
                assert_eq!(latest, Some(id2), "round {round}: the commit succeeded");
            }
        }
    });
}

/// A failed fsync fails the commit and aborts the checkpoint; a full disk fails a part;
/// either way the previous checkpoint stays the latest and the next one proceeds.
#[test]
fn checkpoint_failed_fsync_or_full_disk_keeps_previous() {
    let root = temp_dir("chk-fsync");
    run(move || async move {
        let storage = FaultyStorage::new();
        let mut store = CheckpointStore::open(storage.clone(), &root, 3).await.unwrap();
        let m1 = checkpoint(&mut store, &[("s0", None, b"one")], b"1").await;

        let id2 = store.begin().await.unwrap();
        let part = store.write_part(id2, "s0", None, b"two").await.unwrap();
        storage.plan().borrow_mut().fail_syncs = 1; // The MANIFEST.tmp fsync.
        let err = store.commit(&Manifest::new(id2, vec![part], b"2".to_vec())).await.unwrap_err();
        assert!(matches!(&err, LogError::SyncFailed { path, .. } if path.ends_with("MANIFEST.tmp")), "{err}");
        assert!(!checkpoint_dir(&root, id2).exists(), "a failed commit aborts its checkpoint");
        assert!(latest_is(&store, &m1).await.is_empty());

        let id3 = store.begin().await.unwrap();
        storage.plan().borrow_mut().fail_syncs = 1; // The part's fsync.
        let err = store.write_part(id3, "s0", None, b"three").await.unwrap_err();
        assert!(matches!(err, LogError::SyncFailed { .. }), "{err}");
        store.abort(id3).await.unwrap();

        let id4 = store.begin().await.unwrap();
        let used = storage.plan().borrow().bytes_written;
        storage.plan().borrow_mut().space_bytes = Some(used + 100);
        let err = store.write_part(id4, "s0", None, &[4; 5000]).await.unwrap_err();
        assert!(matches!(err, LogError::NoSpace { .. }), "{err}");
        store.abort(id4).await.unwrap();
        assert!(latest_is(&store, &m1).await.is_empty());

        storage.plan().borrow_mut().space_bytes = None;
        let m5 = checkpoint(&mut store, &[("s0", None, b"five")], b"5").await;
        drop(store);
        let store = CheckpointStore::open(UringStorage, &root, 3).await.unwrap();
        assert_eq!(store.completed(), vec![m1.id, m5.id]);
        assert!(store.open_report().removed_incomplete.is_empty(), "aborts left nothing behind");
        assert!(latest_is(&store, &m5).await.is_empty());
    });
}

#[test]
fn checkpoint_bad_part_names_are_refused() {
    let root = temp_dir("chk-names");
    run(move || async move {
        let mut store = CheckpointStore::open(UringStorage, &root, 3).await.unwrap();
        let id = store.begin().await.unwrap();
        for bad in ["", "../escape", "a/b", "/abs", ".hidden", "..", "sp ace", "naïve"] {
            let err = store.write_part(id, bad, None, b"x").await.unwrap_err();
            assert!(matches!(&err, LogError::InvalidName { name, .. } if name == bad), "{bad:?}: {err}");
        }
        assert!(!root.join("escape.part").exists() && !checkpoint_dir(&root, id).join("a").exists());
        let forged = PartInfo { name: "../escape".into(), len: 1, crc32c: 0, base: None };
        let err = store.commit(&Manifest::new(id, vec![forged.clone()], Vec::new())).await.unwrap_err();
        assert!(matches!(err, LogError::InvalidName { .. }), "{err}");
        assert!(matches!(store.read_part(id, &forged).await, Err(LogError::InvalidName { .. })));
    });
}

/// What a commit or abort cannot do is refused with a typed error and changes nothing.
#[test]
fn checkpoint_commit_refuses_what_cannot_complete() {
    let root = temp_dir("chk-refuse");
    run(move || async move {
        let err = CheckpointStore::open(UringStorage, &root, 0).await.unwrap_err();
        assert!(matches!(err, LogError::InvalidConfig(_)), "{err}");
        let mut store = CheckpointStore::open(UringStorage, &root, 3).await.unwrap();
        let refused = |r: Result<sluice_io::CommitReport, LogError>, what: &str| match r {
            Err(LogError::Checkpoint { reason, .. }) => assert!(reason.contains(what), "{reason}"),
            other => panic!("expected a refusal mentioning {what:?}, got {other:?}"),
        };
        refused(store.commit(&Manifest::new(CheckpointId(9), Vec::new(), Vec::new())).await, "not in progress");

        let (id1, id2) = (store.begin().await.unwrap(), store.begin().await.unwrap());
        let a = store.write_part(id1, "s0", None, b"aaaa").await.unwrap();
        let ghost = PartInfo { name: "s9".into(), ..a.clone() };
        refused(store.commit(&Manifest::new(id1, vec![a.clone(), ghost], Vec::new())).await, "was not written");
        refused(store.commit(&Manifest::new(id1, vec![a.clone(), a.clone()], Vec::new())).await, "listed twice");
        let wrong = PartInfo { crc32c: a.crc32c ^ 1, ..a.clone() };
        let err = store.commit(&Manifest::new(id1, vec![wrong], Vec::new())).await.unwrap_err();
        assert!(err.is_corruption(), "a part that differs from its record: {err}");
        let err = store.write_part(id1, "s1", Some(id1), b"d").await.unwrap_err();
        assert!(matches!(err, LogError::Checkpoint { .. }), "a delta on itself: {err}");

        // 2 completes first: 1 can no longer complete, and its directory is swept.
        let b = store.write_part(id2, "s0", None, b"bbbb").await.unwrap();
        let m2 = Manifest::new(id2, vec![b], Vec::new());
        let report = store.commit(&m2).await.unwrap();
        assert_eq!(report.swept, vec![id1]);
        refused(store.commit(&Manifest::new(id1, vec![a], Vec::new())).await, "not in progress");
        refused(store.commit(&m2).await, "not in progress");
        let err = store.write_part(id1, "s0", None, b"late").await.unwrap_err();
        assert!(matches!(&err, LogError::Checkpoint { reason, .. } if reason.contains("aborted")), "{err}");
        let err = store.write_part(id2, "s0", None, b"overwrite").await.unwrap_err();
        assert!(matches!(&err, LogError::Checkpoint { reason, .. } if reason.contains("completed")), "{err}");
        let err = store.abort(id2).await.unwrap_err();
        assert!(matches!(err, LogError::Checkpoint { .. }), "a completed checkpoint cannot be aborted: {err}");
        assert!(latest_is(&store, &m2).await.is_empty());
    });
}

#[test]
fn checkpoint_ids_advance_past_a_savepoint() {
    run(|| async {
        let root = temp_dir("chk-advance");
        let mut store = CheckpointStore::open(UringStorage, &root, 3).await.unwrap();
        // A job that starts from savepoint 7 numbers its checkpoints after it.
        store.advance_past(CheckpointId(7));
        assert_eq!(store.next_id(), CheckpointId(8));
        let m = checkpoint(&mut store, &[("s0", None, b"x")], b"").await;
        assert_eq!(m.id, CheckpointId(8));
        // Never backwards.
        store.advance_past(CheckpointId(3));
        assert_eq!(store.next_id(), CheckpointId(9));
    });
}

#[test]
fn checkpoint_root_removed_under_the_store_fails_checkpoints_and_is_not_made_again() {
    let root = temp_dir("chk-root-removed");
    run(move || async move {
        let mut store = CheckpointStore::open(UringStorage, &root, 3).await.unwrap();
        let first = checkpoint(&mut store, &[("shard-0", None, b"whole")], b"").await;
        // Removed while a checkpoint is being written: its part fails, as a write does.
        let id = store.begin().await.unwrap();
        std::fs::remove_dir_all(&root).unwrap();
        let err = store.write_part(id, "shard-0", None, b"lost").await.unwrap_err();
        assert!(err.to_string().contains("shard-0"), "{err}");
        // The next one cannot begin, and the root is not made again.
        let err = store.begin().await.unwrap_err();
        assert!(matches!(err, LogError::Checkpoint { .. }) && err.to_string().contains("was removed"), "{err}");
        assert!(!root.exists(), "the root is not made again");
        // Made again by someone else: a delta on a checkpoint that went with it is refused,
        // a whole one commits.
        std::fs::create_dir_all(&root).unwrap();
        let id = store.begin().await.unwrap();
        let part = store.write_part(id, "shard-0", Some(first.id), b"delta").await.unwrap();
        let refused = store.commit(&Manifest::new(id, vec![part], Vec::new())).await.unwrap_err();
        assert!(refused.to_string().contains("not a completed checkpoint"), "{refused}");
        store.abort(id).await.unwrap();
        let whole = checkpoint(&mut store, &[("shard-0", None, b"whole again")], b"").await;
        assert_eq!(store.completed(), vec![whole.id]);
    });
}
