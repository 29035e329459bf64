//! The response shaping under libFuzzer: `caesar_tests::fuzzing::shaping`.

#![no_main]

#[allow(dead_code)]
#[path = "../../src/fuzzing.rs"]
mod fuzzing;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzzing::shaping(data));
