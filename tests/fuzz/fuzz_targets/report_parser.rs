//! The report parser under libFuzzer: `caesar_tests::fuzzing::report_parser`.

#![no_main]

#[allow(dead_code)]
#[path = "../../src/fuzzing.rs"]
mod fuzzing;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzzing::report_parser(data));
