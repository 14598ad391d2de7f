//! Parsing the requests of a cache's everyday traffic allocates nothing: a request borrows its
//! keys and value from the input, and the words of its line are split on the stack. Counted
//! by an allocator that wraps the system's and counts this thread's allocations.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use cairn_proto::{parse, Limits, Request};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn count() {
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        unsafe { System.alloc(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// How many allocations parsing `input` (one whole request) made on this thread.
fn allocations_to_parse(input: &[u8], limits: &Limits) -> usize {
    let before = ALLOCATIONS.with(Cell::get);
    let parsed = parse(input, limits);
    let after = ALLOCATIONS.with(Cell::get);
    let (request, used) = parsed
        .unwrap_or_else(|e| panic!("{:?}: {e:?}", String::from_utf8_lossy(input)))
        .expect("a whole request");
    assert_eq!(used, input.len());
    drop(request);
    after - before
}

#[test]
fn everyday_requests_are_parsed_without_an_allocation() {
    let limits = Limits::default();
    let twenty_keys: String = (0..20).map(|i| format!(" memtier-{i}")).collect();
    let requests = [
        "get memtier-1\r\n".to_string(),
        "gets a  b   c\r\n".to_string(),
        format!("get{twenty_keys}\r\n"),
        "gat 100 memtier-1 memtier-2\r\n".to_string(),
        "set memtier-1 0 0 5\r\nhello\r\n".to_string(),
        "cas memtier-1 3 60 5 77 noreply\r\nhello\r\n".to_string(),
        "delete memtier-1\r\n".to_string(),
        "incr memtier-1 7\r\n".to_string(),
        "touch memtier-1 60\r\n".to_string(),
        "mg memtier-1 v f t c\r\n".to_string(),
        "ms memtier-1 5 T60 F3\r\nhello\r\n".to_string(),
        "md memtier-1 q\r\n".to_string(),
    ];
    for request in &requests {
        assert_eq!(
            allocations_to_parse(request.as_bytes(), &limits),
            0,
            "parsing {request:?}"
        );
    }
}

#[test]
fn a_borrowed_key_list_reads_as_the_line_spells_it() {
    let limits = Limits::default();
    let input = b"gets  a  bb   ccc \r\n";
    let Ok(Some((Request::Get { keys, .. }, _))) = parse(input, &limits) else {
        panic!("a get");
    };
    assert_eq!(keys.len(), 3);
    let read: Vec<&[u8]> = keys.iter().collect();
    assert_eq!(read, [&b"a"[..], b"bb", b"ccc"]);
    assert_eq!(keys, cairn_proto::KeyList::new([&b"a"[..], b"bb", b"ccc"]));
}
