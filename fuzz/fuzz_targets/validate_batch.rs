//! A Produce request's records blob through the batch validators and walker; see
//! `sluice_protocol::fuzzing::validate_batch` for what is checked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = sluice_protocol::fuzzing::validate_batch(data);
});
