//! The throughput dip while a checkpoint ran: the phase's per-second ops inside the
//! checkpoint's window against the rest of the phase, and the table of those figures.
//!
//! ```text
//!   row.timeline_ops + checkpoint_window ─> checkpoint_dip ─> row.checkpoint_dip ─> dip_table
//! ```
//!
//! Non-goals: timing the checkpoint (the suite does, from the `checkpoint` command's reply).

use crate::rows::{CheckpointDip, Row};

/// The dip of one phase. `timeline_ops[i]` holds the ops completed in second `[i, i+1)` of a
/// phase that lasted `phase_secs`; `window` is the checkpoint's (start, end) in the same
/// seconds. Only whole seconds count: the last, partial one is left out, and so is second 0
/// (warm-up: connections opening, caches cold), both from "during" and from "steady".
/// None when no whole second is left on either side (a phase too short, or a checkpoint that
/// fell in the warm-up second or after the phase).
pub fn checkpoint_dip(
    timeline_ops: &[u64],
    phase_secs: f64,
    window: (f64, f64),
) -> Option<CheckpointDip> {
    let (start, end) = window;
    assert!(start >= 0.0 && end >= start, "bad window {window:?}");
    let whole = phase_secs.max(0.0).floor() as usize;
    let ops = |i: usize| timeline_ops.get(i).copied().unwrap_or(0) as f64;
    // Second i overlaps [start, end] if it starts at or before end and ends after start; a
    // window ending exactly on a boundary does not reach into the next second.
    let first = start.floor() as usize;
    let last = (end.ceil() as usize).saturating_sub(1).max(first);
    let during: Vec<usize> = (first..=last).filter(|&i| i >= 1 && i < whole).collect();
    let steady: Vec<usize> = (1..whole).filter(|i| !(first..=last).contains(i)).collect();
    if during.is_empty() || steady.is_empty() {
        return None;
    }
    let mean = |v: &[usize]| v.iter().map(|&i| ops(i)).sum::<f64>() / v.len() as f64;
    let (d, s) = (mean(&during), mean(&steady));
    Some(CheckpointDip {
        checkpoint_secs: end - start,
        seconds_overlapped: during,
        during_ops_per_sec: d,
        steady_ops_per_sec: s,
        during_over_steady: if s > 0.0 { d / s } else { 0.0 },
        shorter_than_one_second: end - start < 1.0,
    })
}

/// The "throughput during checkpoint / steady" markdown table, one line per measured row
/// that took a checkpoint. Empty when none did.
pub fn dip_table(rows: &[Row]) -> String {
    let picked: Vec<&Row> = rows
        .iter()
        .filter(|r| r.checkpoint_window.is_some())
        .collect();
    if picked.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "### throughput during checkpoint / steady\n\nMean ops/s in the whole seconds the \
         checkpoint overlapped, over the mean of the phase's other whole seconds (second 0 is \
         warm-up and left out of both).\n\n\
         | scenario | target | repeat | checkpoint s | window s | seconds averaged | ops/s during | ops/s steady | during / steady | note |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in picked {
        let (a, b) = r.checkpoint_window.unwrap_or_default();
        let head = format!(
            "| {} | {} | {} | {:.3} | {a:.2}-{b:.2} |",
            r.scenario,
            r.target,
            r.repeat,
            b - a
        );
        match &r.checkpoint_dip {
            Some(d) => {
                let secs: Vec<String> = d.seconds_overlapped.iter().map(usize::to_string).collect();
                let note = if d.shorter_than_one_second {
                    "checkpoint shorter than 1 s: averaged over the whole second(s) it overlaps"
                } else {
                    ""
                };
                s.push_str(&format!(
                    "{head} {} | {:.0} | {:.0} | {:.2} | {note} |\n",
                    secs.join(", "),
                    d.during_ops_per_sec,
                    d.steady_ops_per_sec,
                    d.during_over_steady
                ));
            }
            None => s.push_str(&format!(
                "{head} - | - | - | - | no whole second both in and outside the window after warm-up (phase too short) |\n"
            )),
        }
    }
    s
}
