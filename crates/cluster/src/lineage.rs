//! Lineage: where the history of the primary this node followed sits in its own log, so that
//! after a failover the other replicas resume from the new primary instead of copying it
//! whole (as Redis's PSYNC2 keeps the old replication id and offset).
//!
//! ```text
//!   replica of P (log X): each durable batch ─> note(X rev r, own LSN l): "everything of X up
//!                         to r is in my log at or before l"
//!   elected ─> the notes stay; a replica at (X, p) asks to follow ─> the newest note with
//!              r <= p ─> watch my log from l + 1 (the events of X in (r, p] come again:
//!              events carry resulting states, so applying them twice changes nothing)
//!   p past everything noted (it holds events of X this node never got) ─> a full copy
//! ```
//!
//! Notes are kept in memory for the last [`MAX_NOTES`] batches (a replica that is further
//! behind takes a full copy, as it would if the watch history no longer held it).

use std::collections::VecDeque;

/// Most notes kept.
pub const MAX_NOTES: usize = 1 << 16;

/// One log's revisions mapped to this node's own log.
#[derive(Debug, Default)]
pub struct Lineage {
    /// The log of the primary followed (0: none).
    log_id: u64,
    /// (revision of `log_id`, own LSN), both increasing.
    notes: VecDeque<(u64, u64)>,
}

impl Lineage {
    /// Starts over for `log_id` (a full copy or a new primary to follow): notes of another
    /// log are dropped.
    pub fn follow(&mut self, log_id: u64) {
        if self.log_id != log_id {
            self.log_id = log_id;
            self.notes.clear();
        }
    }

    /// Everything of the followed log up to `revision` is in this node's log at or before
    /// `own_lsn`, durable.
    pub fn note(&mut self, revision: u64, own_lsn: u64) {
        if let Some(&(r, l)) = self.notes.back() {
            if revision <= r || own_lsn < l {
                return;
            }
        }
        if self.notes.len() == MAX_NOTES {
            self.notes.pop_front();
        }
        self.notes.push_back((revision, own_lsn));
    }

    /// Forgets everything (the copy here became incomplete).
    pub fn clear(&mut self) {
        self.notes.clear();
    }

    /// Where a replica holding `log_id` up to `revision` may resume in this node's log: the
    /// own LSN of the newest note at or before `revision`. None when the position is of
    /// another log, before the first note, or past the last one.
    pub fn resume_from(&self, log_id: u64, revision: u64) -> Option<u64> {
        if log_id != self.log_id || log_id == 0 {
            return None;
        }
        let &(last, _) = self.notes.back()?;
        if revision > last {
            return None;
        }
        let i = self.notes.partition_point(|&(r, _)| r <= revision);
        i.checked_sub(1).map(|i| self.notes[i].1)
    }

    /// The followed log and the newest revision noted.
    pub fn last(&self) -> Option<(u64, u64)> {
        self.notes.back().map(|&(r, _)| (self.log_id, r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_maps_to_the_newest_note_at_or_before_it() {
        let mut l = Lineage::default();
        l.follow(7);
        for (r, own) in [(10, 100), (20, 130), (30, 131)] {
            l.note(r, own);
        }
        l.note(25, 140); // older than the last: ignored
        assert_eq!(l.resume_from(7, 10), Some(100));
        assert_eq!(l.resume_from(7, 29), Some(130));
        assert_eq!(l.resume_from(7, 30), Some(131));
        assert_eq!(l.resume_from(7, 31), None, "past what this node holds");
        assert_eq!(l.resume_from(7, 9), None, "before the first note");
        assert_eq!(l.resume_from(8, 20), None, "another log");
        assert_eq!(l.last(), Some((7, 30)));
        l.follow(8);
        assert_eq!(l.resume_from(7, 20), None, "notes of the old log dropped");
    }
}
