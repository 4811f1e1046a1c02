//! A request frame body (no size prefix) through `decode_request`; see
//! `sluice_protocol::fuzzing::decode_request` for what is checked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = sluice_protocol::fuzzing::decode_request(data);
});
