#![no_main]
// The property is check_control_bodies's (src/untrusted): one call, so a finding replays as one call in tests/fuzz.rs.
libfuzzer_sys::fuzz_target!(|data: &[u8]| iac_code_agui::untrusted::check_control_bodies(data));
