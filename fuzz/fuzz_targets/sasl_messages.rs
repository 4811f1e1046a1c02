//! SASL messages from a client that has not authenticated (SCRAM, PLAIN, OAUTHBEARER) and a
//! broker's SCRAM challenge; see `sluice_broker::security::fuzzing::sasl_messages`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sluice_broker::security::fuzzing::sasl_messages(data);
});
