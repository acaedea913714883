#![no_main]
// The property is check_a2a_stream's (src/untrusted): one call, so a finding replays as one call in tests/fuzz.rs.
libfuzzer_sys::fuzz_target!(|data: &[u8]| iac_code_agui::untrusted::check_a2a_stream(data));
