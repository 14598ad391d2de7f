//! `cairn-wal-inspect dump|verify DIR`: prints a log's segments (and with `dump` its records),
//! checks every checksum and the LSN sequence, and exits 1 naming the file and offset of the
//! first problem.

use std::path::PathBuf;
use std::process::ExitCode;

use cairn_wal::{scan_dir, RealFs};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (dump, dir) = match args.as_slice() {
        [_, cmd, dir] if cmd == "dump" => (true, PathBuf::from(dir)),
        [_, cmd, dir] if cmd == "verify" => (false, PathBuf::from(dir)),
        _ => {
            eprintln!("usage: cairn-wal-inspect dump|verify DIR");
            return ExitCode::from(2);
        }
    };
    let scan = scan_dir(&RealFs, &dir, |_, lsn, payload| {
        if dump {
            let shown: String = payload
                .iter()
                .take(32)
                .map(|b| {
                    if b.is_ascii_graphic() || *b == b' ' {
                        *b as char
                    } else {
                        '.'
                    }
                })
                .collect();
            println!("  lsn {lsn} len {} {shown:?}", payload.len());
        }
    });
    let scan = match scan {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cairn-wal-inspect: {e}");
            return ExitCode::from(1);
        }
    };
    let mut ok = true;
    let mut expected = None;
    let mut log_id = None;
    for s in &scan.segments {
        println!(
            "{}: first_lsn {} last_lsn {} records {} payload_bytes {} end_offset {}",
            s.path.display(),
            s.first_lsn,
            s.last_lsn,
            s.records,
            s.payload_bytes,
            s.end_offset
        );
        if let Some((offset, why)) = s.problem {
            println!("CORRUPT {} at offset {offset}: {why}", s.path.display());
            ok = false;
        }
        if expected.is_some_and(|e| e != s.first_lsn) {
            println!(
                "CORRUPT {} at offset 0: gap in the log's sequence numbers",
                s.path.display()
            );
            ok = false;
        }
        if log_id.is_some() && s.log_id.is_some() && log_id != s.log_id {
            println!(
                "CORRUPT {} at offset 0: segment belongs to another log",
                s.path.display()
            );
            ok = false;
        }
        log_id = log_id.or(s.log_id);
        expected = Some(s.last_lsn + 1);
    }
    let records: u64 = scan.segments.iter().map(|s| s.records).sum();
    println!(
        "{} segments, {records} records: {}",
        scan.segments.len(),
        if ok { "ok" } else { "CORRUPT" }
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
