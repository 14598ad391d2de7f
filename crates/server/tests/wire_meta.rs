//! Golden wire tests of the meta protocol (mg, ms, md, ma, mn, me).

mod common;

use common::{golden, Server};

#[test]
fn meta_set_and_get() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    golden(
        &mut c,
        &[
            ("ms foo 3 F7 T0\r\nbar\r\n", "HD\r\n"),
            ("mg foo v f t\r\n", "VA 3 f7 t-1\r\nbar\r\n"),
            ("mg foo s k Oab\r\n", "HD s3 kfoo Oab\r\n"),
            ("mg foo\r\n", "HD\r\n"),
            ("mg nope v\r\n", "EN\r\n"),
            ("mg nope v q\r\n", ""),
            ("mg nope v Oxy k\r\n", "EN Oxy knope\r\n"),
            ("ms foo 1 q\r\nz\r\n", ""),
            ("mg foo v\r\n", "VA 1\r\nz\r\n"),
            ("ms foo 1 ME\r\nz\r\n", "NS\r\n"),
            ("ms new 1 MR\r\nz\r\n", "NS\r\n"),
            ("ms foo 2 MA\r\n12\r\n", "HD\r\n"),
            ("ms foo 2 MP\r\n00\r\n", "HD\r\n"),
            ("mg foo v\r\n", "VA 5\r\n00z12\r\n"),
            ("ms other 2 MA N30\r\nab\r\n", "HD\r\n"),
            ("mg other v t\r\n", "VA 2 t30\r\nab\r\n"),
            ("ms Zm9v 1 k b\r\nq\r\n", "HD kZm9v b\r\n"),
            ("mg foo v\r\n", "VA 1\r\nq\r\n"),
        ],
    );
}

#[test]
fn meta_cas_and_hits() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    golden(
        &mut c,
        &[
            ("ms k 1 E500\r\nx\r\n", "HD\r\n"),
            ("mg k c h\r\n", "HD c500 h0\r\n"),
            ("mg k h\r\n", "HD h1\r\n"),
            ("ms k 1 C499\r\ny\r\n", "EX\r\n"),
            ("ms k 1 C500 E600 c\r\ny\r\n", "HD c600\r\n"),
            ("ms missing 1 C1\r\ny\r\n", "NF\r\n"),
            ("md k C1\r\n", "EX\r\n"),
            ("md k C600 q\r\n", ""),
            ("md k\r\n", "NF\r\n"),
            ("md k q\r\n", "NF\r\n"),
        ],
    );
}

#[test]
fn meta_arith() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    golden(
        &mut c,
        &[
            ("ma n\r\n", "NF\r\n"),
            ("ma n N0 J10 v\r\n", "VA 2\r\n10\r\n"),
            ("ma n v\r\n", "VA 2\r\n11\r\n"),
            ("ma n D5 MD v\r\n", "VA 1\r\n6\r\n"),
            ("ma n D100 M- v\r\n", "VA 1\r\n0\r\n"),
            ("ma n\r\n", "HD\r\n"),
            ("ma n q\r\n", ""),
            ("mg n v\r\n", "VA 1\r\n2\r\n"),
            ("ms s 1\r\nx\r\n", "HD\r\n"),
            (
                "ma s\r\n",
                "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
            ),
            (
                "ma n MX\r\n",
                "CLIENT_ERROR invalid mode for ma M token\r\n",
            ),
        ],
    );
}

#[test]
fn meta_invalidation_and_recache() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    golden(
        &mut c,
        &[
            // Autovivify: the first client wins the right to fill the placeholder.
            ("mg v N30 s\r\n", "HD s0 W\r\n"),
            ("mg v N30 s\r\n", "HD s0 Z\r\n"),
            ("ms x 1\r\nx\r\n", "HD\r\n"),
            ("md x I\r\n", "HD\r\n"),
            ("mg x v\r\n", "VA 1 X W\r\nx\r\n"),
            ("mg x v\r\n", "VA 1 Z X\r\nx\r\n"),
        ],
    );
}

#[test]
fn meta_errors_and_debug() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    golden(
        &mut c,
        &[
            // memcached 1.6.4x: a meta command needs a key.
            ("mg\r\n", "CLIENT_ERROR bad command line format\r\n"),
            ("mg Zm9v b k v\r\n", "EN kZm9v b\r\n"),
            ("mg nope k Oa\r\n", "EN knope Oa\r\n"),
            ("mg k v v\r\n", "CLIENT_ERROR duplicate flag\r\n"),
            ("mg k !\r\n", "CLIENT_ERROR invalid flag\r\n"),
            (
                "mg k T-\r\n",
                "CLIENT_ERROR bad token in command line format\r\n",
            ),
            ("ms k 2 !\r\nhi\r\n", "CLIENT_ERROR invalid flag\r\n"),
            ("ms k 1 T5\r\nx\r\n", "HD\r\n"),
            ("me nope\r\n", "EN\r\n"),
        ],
    );
    let me = String::from_utf8(c.exchange(b"me k\r\n")).unwrap();
    assert!(
        me.starts_with("ME k exp=") && me.contains(" fetch=no ") && me.ends_with(" size=19\r\n"),
        "{me}"
    );
}

/// `mg`'s `l` and `h` answer for the accesses before this one, `t` for the TTL after it, and
/// `me`'s `la=` for the last access: the item's own times, not its segment's. The server runs
/// in this process so that its clock can be moved ahead instead of sleeping.
///
/// The server's clock also follows the wall clock, so a second that ticks between two requests
/// adds one to the times it answers: a failed run is tried again, a few times, only if the
/// wall clock's second changed during it.
#[test]
fn last_access_and_hits_are_the_items_own() {
    for attempt in 1.. {
        let second = cairn_server::ticked_now_unix();
        let run = std::panic::catch_unwind(last_access_and_hits_scenario);
        match run {
            Ok(()) => return,
            Err(_) if attempt < 5 && cairn_server::ticked_now_unix() != second => continue,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

fn last_access_and_hits_scenario() {
    let server = common::InProcess::cache();
    let mut c = server.connect();
    golden(
        &mut c,
        &[
            ("ms old 1\r\nx\r\n", "HD\r\n"),
            ("ms k 1 T1000\r\nv\r\n", "HD\r\n"),
        ],
    );
    server.ctx.advance_clock(100);
    golden(
        &mut c,
        &[
            // Stored 100 s ago, never fetched; this mg is a fetch.
            ("mg k l h t\r\n", "HD l100 h0 t900\r\n"),
            ("mg k l h\r\n", "HD l0 h1\r\n"),
            (
                "me k\r\n",
                "ME k exp=900 la=0 cas=2 fetch=yes cls=1 size=19\r\n",
            ),
        ],
    );
    server.ctx.advance_clock(30);
    golden(
        &mut c,
        &[
            // u: look without bumping.
            ("mg k l u\r\n", "HD l30\r\n"),
            ("mg k l\r\n", "HD l30\r\n"),
            ("mg k l\r\n", "HD l0\r\n"),
            // A text get and a touch are accesses too; the neighbour in the same segment kept
            // its own time.
            ("mg old l h\r\n", "HD l130 h0\r\n"),
        ],
    );
    server.ctx.advance_clock(7);
    golden(
        &mut c,
        &[
            ("get k\r\n", "VALUE k 0 1\r\nv\r\nEND\r\n"),
            (
                "me k\r\n",
                "ME k exp=863 la=0 cas=2 fetch=yes cls=1 size=19\r\n",
            ),
        ],
    );
    server.ctx.advance_clock(5);
    golden(
        &mut c,
        &[
            ("touch k 50\r\n", "TOUCHED\r\n"),
            ("mg k l t\r\n", "HD l0 t50\r\n"),
        ],
    );
}

/// memcached 1.6.4x's protocol.txt, flag by flag where 1.6.18 differed or cairn did: E on every
/// command that writes, C on mg (a match sends no value: 1.6.45's metaget.t), NS for append/prepend to a missing key, s after an append, c
/// on every reply that reports an item (c0 where ms stored nothing, as memcached), quiet mode
/// hiding only the nominal reply (mg q still answers a hit without value with HD, as
/// memcached 1.6.18 does), flags of other commands accepted and ignored.
#[test]
fn meta_follows_protocol_txt_1_6_4x() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    golden(
        &mut c,
        &[
            ("ms k 2 E100 c\r\nab\r\n", "HD c100\r\n"),
            // s: the size after the append; E: the unique of the new value.
            ("ms k 2 MA s c E101\r\ncd\r\n", "HD s4 c101\r\n"),
            ("mg k s v c\r\n", "VA 4 s4 c101\r\nabcd\r\n"),
            ("ms nope 2 MA c\r\nab\r\n", "NS c0\r\n"),
            ("ms nope 2 MP k\r\nab\r\n", "NS knope\r\n"),
            ("ms k 2 ME c k\r\nxx\r\n", "NS c0 kk\r\n"),
            ("ms k 2 C1 c\r\nxx\r\n", "EX c0\r\n"),
            // q hides HD only.
            ("ms gone 2 C1 c q\r\nxx\r\n", "NF c0\r\n"),
            ("ms k 2 q T0\r\nzz\r\n", ""),
            // C on mg (1.6.45): the unique the client holds; another one answers as without C.
            ("mg k C5 v\r\n", "VA 2\r\nzz\r\n"),
            ("mg k t\r\n", "HD t-1\r\n"),
            ("mg k q\r\n", "HD\r\n"),
            ("mg k q v\r\n", "VA 2\r\nzz\r\n"),
            ("mg nope q v\r\n", ""),
            // E on mg: a touch (T) or a creation (N) takes the client's unique.
            ("mg k T30 E200 c t\r\n", "HD c200 t30\r\n"),
            ("mg k C200 E201 T40 c t\r\n", "HD c201 t40\r\n"),
            // ...and the matching one drops the value: HD, the other flags as usual.
            ("mg k C201 v c s\r\n", "HD c201 s2\r\n"),
            ("mg k C200 v c\r\n", "VA 2 c201\r\nzz\r\n"),
            ("mg new N30 E300 c\r\n", "HD c300 W\r\n"),
            // md I bumps the unique (E's here); x keeps the item without its value.
            ("md k I E400 q\r\n", ""),
            ("mg k c\r\n", "HD c400 X W\r\n"),
            ("md k x E500\r\n", "HD\r\n"),
            ("mg k v c s\r\n", "VA 0 c500 s0\r\n\r\n"),
            ("md k q\r\n", ""),
            ("md k q\r\n", "NF\r\n"),
            ("ma n N0 J5 E600 c v\r\n", "VA 1 c600\r\n5\r\n"),
            ("ma n E601 c t\r\n", "HD c601 t-1\r\n"),
            ("ma n q v\r\n", ""),
            ("ma n q\r\n", ""),
            ("mg n v\r\n", "VA 1\r\n8\r\n"),
            ("ma nope q\r\n", "NF\r\n"),
            // Flags of other commands are accepted and ignored; unknown letters are not.
            ("mg n F5 D3 x I v\r\n", "VA 1\r\n8\r\n"),
            ("md n MS J1\r\n", "HD\r\n"),
            ("mg n Zz\r\n", "CLIENT_ERROR invalid flag\r\n"),
            (
                "mg n MSS\r\n",
                "CLIENT_ERROR incorrect length for M token\r\n",
            ),
            ("mg\r\n", "CLIENT_ERROR bad command line format\r\n"),
            ("ms\r\n", "CLIENT_ERROR bad command line format\r\n"),
        ],
    );
}

/// ms with C as memcached 1.6.45's `do_store_item` has it (metaget.t's "ms append with bad
/// cas"): set and replace compare (NF, EX); append and prepend compare unless C is 0 and say
/// NS for a missing key whatever C says; add ignores C. Breaking it: checking C before the
/// mode answers NF to the first line.
#[test]
fn ms_compares_cas_by_mode() {
    let server = Server::start(&[]);
    golden(
        &mut server.connect(),
        &[
            ("ms a 2 MA C5000 T30\r\nhi\r\n", "NS\r\n"),
            ("ms a 2 MP C5000\r\nhi\r\n", "NS\r\n"),
            ("ms a 2 MA C5000 N30\r\nhi\r\n", "HD\r\n"),
            ("ms b 2 ME C5000 E2 c\r\nhi\r\n", "HD c2\r\n"),
            ("ms b 2 ME C2\r\nho\r\n", "NS\r\n"),
            ("ms b 1 MA C7\r\n!\r\n", "EX\r\n"),
            ("ms b 1 MA C0 E3 c\r\n!\r\n", "HD c3\r\n"),
            ("ms b 1 MA C3 E4 c\r\n?\r\n", "HD c4\r\n"),
            ("mg b v\r\n", "VA 4\r\nhi!?\r\n"),
            ("ms b 1 C0\r\nx\r\n", "EX\r\n"),
            ("ms b 1 MR C9\r\nx\r\n", "EX\r\n"),
            ("ms gone 1 MR C9\r\nx\r\n", "NF\r\n"),
            ("ms gone 1 C9\r\nx\r\n", "NF\r\n"),
        ],
    );
}

/// A stale set (ms with I and an older C: a refill that lost a race with an invalidation)
/// stores the value as stale but keeps the item's TTL and whether its win token is out
/// (memcached's CAS_STALE; metaget.t "TTL wasn't modified", "win token already sent").
/// Breaking it: storing with the request's T gives t90, and a fresh item answers W, not Z.
#[test]
fn a_stale_set_keeps_the_ttl_and_the_win_token() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    golden(
        &mut c,
        &[
            ("ms s 3 E50\r\nmoo\r\n", "HD\r\n"),
            ("md s I T30 E60\r\n", "HD\r\n"),
            ("mg s c v\r\n", "VA 3 c60 X W\r\nmoo\r\n"),
            ("ms s 1 T90 C0\r\nf\r\n", "EX\r\n"),
            ("ms s 1 I T90 C59 E70\r\nf\r\n", "HD\r\n"),
            ("mg s c v\r\n", "VA 1 c70 Z X\r\nf\r\n"),
        ],
    );
    let got = String::from_utf8(c.exchange(b"mg s t\r\n")).unwrap();
    let ttl: u32 = got
        .strip_prefix("HD t")
        .and_then(|r| r.split(' ').next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("{got:?}"));
    assert!((1..=30).contains(&ttl), "TTL raised: {got:?}");
    // The matching unique is a plain set: fresh, its own TTL, no stale mark.
    golden(
        &mut c,
        &[
            ("ms s 1 I C70 E80 T0\r\ng\r\n", "HD\r\n"),
            ("mg s c t v\r\n", "VA 1 c80 t-1\r\ng\r\n"),
        ],
    );
}
