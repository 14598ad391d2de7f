//! `slabs automove ...`, `slabs reassign ...` and `debugtime N` as memcached 1.6.45 parses them
//! (its `process_slabs_command`, `process_slabs_automove_command` and the debug build's
//! `process_debugtime_command`): which lines are requests, and the error line of the others.

use cairn_proto::{parse, Limits, ProtocolError, Request, Slabs};

fn ok(input: &str) -> Request<'_> {
    let (r, n) = parse(input.as_bytes(), &Limits::default())
        .expect("parses")
        .expect("complete");
    assert_eq!(n, input.len(), "{input:?} consumed whole");
    r
}

fn err(input: &str) -> ProtocolError {
    parse(input.as_bytes(), &Limits::default()).expect_err(input)
}

#[test]
fn slabs_automove_is_checked_as_memcached_checks_it() {
    for line in [
        "slabs automove 0\r\n",
        "slabs automove 2\r\n",
        "slabs automove ratio 0.8\r\n",
        "slabs automove freeratio 1\r\n",
        "slabs automove window 3\r\n",
        "slabs automove window 1800\r\n",
    ] {
        assert_eq!(
            ok(line),
            Request::Slabs {
                cmd: Slabs::Automove,
                noreply: false
            },
            "{line:?}"
        );
    }
    // strtol-testing.t: not a number.
    let bad = "CLIENT_ERROR bad command line format";
    assert_eq!(err("slabs automove invalid\r\n").reply_line(), bad);
    assert_eq!(err("slabs automove window x\r\n").reply_line(), bad);
    assert_eq!(
        err("slabs automove window 2\r\n").reply_line(),
        "CLIENT_ERROR automove window too low or too high"
    );
    for line in [
        "slabs automove 3\r\n",
        "slabs automove ratio x\r\n",
        "slabs automove ratio\r\n",
        "slabs automove\r\n",
        "slabs\r\n",
        "slabs nonsense 1\r\n",
        "slabs reassign 1\r\n",
    ] {
        assert_eq!(err(line).reply_line(), "ERROR", "{line:?}");
    }
    // noreply silences the reply and its errors alike.
    assert_eq!(
        ok("slabs automove 1 noreply\r\n"),
        Request::Slabs {
            cmd: Slabs::Automove,
            noreply: true
        }
    );
    assert!(err("slabs automove x noreply\r\n").silent);
    assert!(!err("slabs automove x\r\n").silent);
}

#[test]
fn slabs_reassign_takes_two_class_ids() {
    assert_eq!(
        ok("slabs reassign -1 5\r\n"),
        Request::Slabs {
            cmd: Slabs::Reassign { src: -1, dst: 5 },
            noreply: false
        }
    );
    for line in ["slabs reassign a 1\r\n", "slabs reassign 1 99999999999\r\n"] {
        assert_eq!(
            err(line).reply_line(),
            "CLIENT_ERROR bad command line format",
            "{line:?}"
        );
    }
}

#[test]
fn debugtime_takes_seconds_ahead() {
    assert_eq!(ok("debugtime 3\r\n"), Request::DebugTime { secs: Some(3) });
    // Pause, resume and a jump back are memcached's, not cairn's: the server refuses them.
    for line in ["debugtime p\r\n", "debugtime r\r\n", "debugtime -1\r\n"] {
        assert_eq!(ok(line), Request::DebugTime { secs: None }, "{line:?}");
    }
    assert_eq!(err("debugtime\r\n").reply_line(), "ERROR");
}
