#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = omp_format::OffloadBinary::parse_all(data);
    let _ = omp_format::entries::parse_entry_table(data);
    let _ = omp_format::elf::header(data);
});
