//! Items the unit tests build events from: an item's metadata at a revision, and a put.

use cairn_store::{ItemMeta, Mutation, Revision};

pub(crate) fn meta(rev: Revision) -> ItemMeta {
    ItemMeta {
        flags: 1,
        exptime: 0,
        cas: 9,
        last_access: 0,
        fetched: false,
        stale: false,
        win_sent: false,
        mod_revision: rev,
    }
}

pub(crate) fn put<'a>(key: &'a [u8], value: &'a [u8]) -> Mutation<'a> {
    Mutation::Stored {
        key,
        value,
        meta: meta(0),
        prev: None,
    }
}
