//! A 100 MiB file is journaled and restored while memory stays bounded (its own test binary, so
//! the process's peak RSS belongs to this test alone).

mod common;

use std::io::{Read, Write};

use common::Fixture;
use toolyard_records::Journal;
use toolyard_workspace::hash_reader;

const SIZE: usize = 100 << 20;

/// Deterministic, incompressible-looking content, generated a block at a time.
fn fill(out: &mut impl Write) {
    let mut block = vec![0u8; 1 << 20];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..SIZE / block.len() {
        for b in block.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        out.write_all(&block).unwrap();
    }
}

/// Peak resident memory of this process so far, in KiB.
fn vm_hwm_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn a_100_mib_file_is_journaled_and_restored_with_bounded_memory() {
    let fx = Fixture::new();
    let path = fx.abs("big.bin");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        fill(&mut f);
        f.flush().unwrap();
    }
    let original = hash_reader(std::fs::File::open(&path).unwrap()).unwrap();
    let j = Journal::open(&fx.state).unwrap();
    let baseline = vm_hwm_kib();

    let id = fx.write(&j, "s", "big.bin", b"small now");
    assert_eq!(j.get(id).unwrap().old_bytes, Some(SIZE as u64));
    assert_eq!(fx.bytes("big.bin").unwrap(), b"small now");
    let out = j.undo(&fx.ws, id, "s", "u", false).unwrap();
    assert_eq!(out.bytes, SIZE as u64);

    let growth_mib = (vm_hwm_kib().saturating_sub(baseline)) / 1024;
    let mut restored = std::fs::File::open(&path).unwrap();
    assert_eq!(restored.metadata().unwrap().len(), SIZE as u64);
    assert_eq!(
        hash_reader(&mut restored as &mut dyn Read).unwrap(),
        original
    );
    assert!(
        growth_mib < 60,
        "peak memory grew by {growth_mib} MiB while journaling 100 MiB"
    );
    eprintln!("peak RSS growth: {growth_mib} MiB");
}
