//! Replays the committed fuzz corpora (`fuzz/corpus/`) through the fuzz targets' own bodies
//! (`sluice_protocol::fuzzing`) on stable Rust, so CI checks every seed and every saved crash
//! reproducer without cargo-fuzz.
//!
//! The seeds are frames real clients sent (scripts/capture-frames.py, docs/fuzzing.md): one that
//! no longer decodes is a compatibility regression, not fuzzer noise. Files under
//! `fuzz/corpus/regressions/<target>/` are minimized crash inputs: they must merely not panic.

use std::fs;
use std::path::{Path, PathBuf};

use sluice_protocol::fuzzing;
use sluice_protocol::kafka_protocol::messages::ApiKey;
use sluice_protocol::request::RequestError;
use sluice_protocol::versions::supported_versions;

fn corpus_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus").join(name)
}

/// (file name, contents) of every file in `dir`, sorted; empty if `dir` does not exist.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<_> = entries
        .map(|e| e.expect("reading the corpus directory").path())
        .filter(|p| p.is_file())
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, fs::read(&p).expect("reading a corpus file"))
        })
        .collect();
    out.sort();
    out
}

/// Captured frames are named `<key>-<Api>-v<version>-<hash>`; anything else in the directory
/// (an input a fuzzer added) need not decode.
fn captured_frame_version(name: &str) -> Option<(i16, i16)> {
    let mut parts = name.splitn(4, '-');
    let key = parts.next()?.parse().ok()?;
    let _api = parts.next()?;
    let version = parts.next()?.strip_prefix('v')?.parse().ok()?;
    parts.next()?;
    Some((key, version))
}

fn advertised(key: i16, version: i16) -> bool {
    let range = ApiKey::try_from(key).ok().and_then(supported_versions);
    range.is_some_and(|r| r.min <= version && version <= r.max)
}

#[test]
fn every_captured_client_frame_at_an_advertised_version_decodes() {
    let corpus = files(&corpus_dir("decode_request"));
    assert!(
        corpus.len() >= 100,
        "expected the captured corpus, found {} files",
        corpus.len()
    );
    let mut failures = Vec::new();
    let mut captured = 0;
    for (name, data) in &corpus {
        let result = fuzzing::decode_request(data);
        let Some((key, version)) = captured_frame_version(name) else {
            continue;
        };
        captured += 1;
        match result {
            Ok(request) if (request.api_key as i16, request.api_version) == (key, version) => {}
            Ok(request) => failures.push(format!(
                "{name}: decoded as {:?} v{}",
                request.api_key, request.api_version
            )),
            // A client pinned to an old protocol (kafka-python's api_version=(0, 11)) sends
            // versions we do not advertise; Kafka 4.1 refuses those the same way.
            Err(RequestError::Malformed(_)) if !advertised(key, version) => {}
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    assert!(captured >= 100, "only {captured} captured frames");
    assert!(
        failures.is_empty(),
        "real client frames that do not decode:\n{}",
        failures.join("\n")
    );
}

#[test]
fn every_captured_produce_records_blob_validates() {
    let corpus = files(&corpus_dir("validate_batch"));
    assert!(
        corpus.len() >= 10,
        "expected the captured corpus, found {} files",
        corpus.len()
    );
    let mut failures = Vec::new();
    let mut captured = 0;
    for (name, data) in &corpus {
        let outcome = fuzzing::validate_batch(data);
        if !name.starts_with("records-") {
            continue;
        }
        captured += 1;
        match &outcome.produce {
            Ok(info) if info.batch_count == outcome.iterated_batches => {}
            Ok(info) => failures.push(format!(
                "{name}: {} batches validated, {} walked",
                info.batch_count, outcome.iterated_batches
            )),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    assert!(captured >= 10, "only {captured} captured records blobs");
    assert!(
        failures.is_empty(),
        "real producer batches that do not validate:\n{}",
        failures.join("\n")
    );
}

#[test]
fn saved_crash_reproducers_do_not_panic() {
    // Calling the target is the test: a reproducer that panics again fails it.
    for (name, data) in files(&corpus_dir("regressions/decode_request")) {
        let result = fuzzing::decode_request(&data);
        eprintln!(
            "decode_request regression {name}: {}",
            if result.is_ok() { "decodes" } else { "refused" }
        );
    }
    for (name, data) in files(&corpus_dir("regressions/validate_batch")) {
        let outcome = fuzzing::validate_batch(&data);
        eprintln!(
            "validate_batch regression {name}: {:?}",
            outcome.produce.map(|i| i.batch_count)
        );
    }
}
