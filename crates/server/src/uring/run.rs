//! One connection thread's loop (see the module doc of `uring`): it sets up the thread's
//! ring (provided buffers, registered file table, the eventfd read, the flash tier's lent
//! ring), then turns until told to stop, and tears the ring down without freeing a buffer the
//! kernel may still use.
//!
//! ```text
//!   turn: inbox (woken, jobs, mark moved, stop) ─> settle safe waits ─> start new tasks
//!     ─> poll the ready tasks (two passes: the log write of the turn may ready more)
//!     ─> answered any: submit + sched_yield (gated) ─> io_uring_enter (wait if none ready)
//!     ─> reap completions ─> wake their tasks ─> re-arm the eventfd read
//! ```

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::Instant;

use io_uring::{opcode, squeue, types, IoUring};

use super::buffers::BufRing;
use super::driver::{with_driver, Driver, CANCEL, DRIVER, EVENTFD, FIXED_FILES_MAX, RELEASE};
use super::executor::{Job, Shared, Task, TaskWaker, READY};
use super::flash_reads::FlashReads;
use super::waits::{settle_safe_waits, MarkWaker, SafeWaits, SafeWatch, SAFE_WAITS};
use super::yield_gate::YieldGate;

thread_local! {
    /// When the thread's current turn began polling its tasks (see [`turn_started`]).
    static TURN_STARTED: std::cell::Cell<Option<Instant>> = const { std::cell::Cell::new(None) };
}

/// On a connection thread of this engine, when its current turn began polling the tasks that
/// the turn's completions woke, so after their input had arrived: a connection starts its
/// requests' latencies from it instead of reading the clock once more for each batch (one
/// clock read a turn, not one a connection;
/// docs/decisions/0007-no-allocation-and-one-clock-read-a-request.md). `None` on other threads.
pub(crate) fn turn_started() -> Option<Instant> {
    TURN_STARTED.with(std::cell::Cell::get)
}

/// One connection thread's loop (see the module doc): the ring set up, then turns until the
/// pool stops, then the ring torn down. Each turn's steps are [`Turns`]' methods, in order.
/// `turn_yield`: a turn that answered connections may end with a yield (`uring_turn_yield`).
pub(super) fn run(
    shared: Arc<Shared>,
    ring: IoUring,
    multishot: bool,
    persist: Option<Arc<cairn_persist::Persistence>>,
    turn_yield: bool,
) -> io::Result<()> {
    READY.with(|r| r.borrow_mut().owner = Arc::as_ptr(&shared) as usize);
    let eventfd_read = install_ring(&shared, ring, multishot)?;
    cairn_flash::lend_thread_ring(Box::new(FlashReads));
    // The requests' waits for the log's safe mark, and the one registration they share.
    if persist.is_some() {
        SAFE_WAITS.with(|w| *w.borrow_mut() = Some(SafeWaits::default()));
    }
    let mut turns = Turns {
        mark_waker: Waker::from(Arc::new(MarkWaker(Arc::clone(&shared)))),
        shared,
        persist: persist.as_deref(),
        watch: None,
        tasks: Vec::new(),
        free: Vec::new(),
        this_turn: Vec::new(),
        completions: Vec::new(),
        wakers: Vec::new(),
        turn: 0,
        gate: turn_yield.then(YieldGate::default),
    };
    let result = loop {
        turns.turn += 1;
        TURN_STARTED.with(|t| t.set(Some(Instant::now())));
        let Some((jobs, mark_moved)) = turns.take_inbox() else {
            break Ok(());
        };
        turns.settle_safe_waits(mark_moved);
        turns.start_tasks(jobs);
        let polled = turns.poll_ready_tasks();
        if let Err(e) = turns.yield_after_answering(polled) {
            break Err(e);
        }
        if let Err(e) = turns.enter_ring() {
            break Err(e);
        }
        if turns.reap_and_wake() {
            with_driver(|d| d.push(&eventfd_read))?;
        }
    };
    tear_down(turns.tasks);
    result
}

/// Makes the thread's [`Driver`] from `ring`: provided buffers for multishot receives where
/// the kernel has them (`multishot`, see `new_ring`), a registered file table, and the
/// eventfd read queued; returns that read's entry, queued again each time it completes.
fn install_ring(shared: &Shared, ring: IoUring, multishot: bool) -> io::Result<squeue::Entry> {
    // Multishot receives on a kernel that has them (see `new_ring`) and lets the buffer
    // ring be registered; single-shot receives otherwise (or under a test switch).
    #[cfg(feature = "test-hooks")]
    let multishot = multishot && !crate::test_hooks::single_shot_recv();
    let bufs = if !multishot {
        None
    } else {
        BufRing::register(&ring).ok()
    };
    // A sparse table of registered files for the thread's sockets (kernels from 5.19), as
    // large as the descriptor limit allows.
    let fixed_files = fixed_file_slots();
    let fixed = (fixed_files > 0 && ring.submitter().register_files_sparse(fixed_files).is_ok())
        .then(|| (0..fixed_files).rev().collect());
    DRIVER.with(|d| {
        *d.borrow_mut() = Some(Driver {
            ring,
            slots: Vec::new(),
            free: Vec::new(),
            bufs,
            fixed,
        })
    });
    // The eventfd read, always pending: another thread's wake completes it. Its 8 bytes
    // are leaked: the kernel may still write them while the ring is torn down.
    let counter: &'static mut u64 = Box::leak(Box::new(0u64));
    let eventfd_read = opcode::Read::new(
        types::Fd(shared.eventfd.as_raw_fd()),
        (counter as *mut u64).cast(),
        8,
    )
    .build()
    .user_data(EVENTFD);
    with_driver(|d| d.push(&eventfd_read))?;
    Ok(eventfd_read)
}

/// A connection thread's state from one turn to the next. Its methods are the steps of a
/// turn, in the order `run` calls them; each is `#[inline(always)]`: they are one loop, split
/// to be read, and compile to the one function they were.
struct Turns<'p> {
    /// The thread's side that other threads see: its inbox and whether it sleeps.
    shared: Arc<Shared>,
    /// The log, when persistence is on: its records are written here once a turn (async mode).
    persist: Option<&'p cairn_persist::Persistence>,
    /// Wakes the thread when the log's safe mark moves for its waiting requests (`waits.rs`).
    mark_waker: Waker,
    /// The thread's one registration in the log's waiter registry.
    watch: SafeWatch<'p>,
    /// The connections' tasks by id; `None` once a task ended (its id is then in `free`).
    tasks: Vec<Option<Task>>,
    /// Ids of ended tasks, taken again by new ones.
    free: Vec<usize>,
    /// The tasks to poll in this turn (woken since the last one, or new).
    this_turn: Vec<usize>,
    /// The completions of a turn, copied out of the ring before they are handled.
    completions: Vec<(u64, i32, u32)>,
    /// The tasks a turn's completions wake; kept with its room (one allocation a turn
    /// otherwise: about 1% of a SYNC set's server CPU, docs/decisions/0013-the-waiter-registry.md).
    wakers: Vec<Waker>,
    /// The turn's number (a task is polled at most once a turn; a second pass counts as a turn).
    turn: u64,
    /// Whether a turn may end with a yield; `None`: never.
    gate: Option<YieldGate>,
}

impl Turns<'_> {
    /// Takes what other threads handed over: the tasks they woke join this turn's; returns the
    /// new connections' jobs and whether the log's safe mark moved, or `None` to stop.
    #[inline(always)]
    fn take_inbox(&mut self) -> Option<(Vec<Job>, bool)> {
        let (jobs, mark_moved, stop) = {
            let mut inbox = self.shared.inbox.lock();
            self.this_turn.append(&mut inbox.woken);
            let moved = std::mem::take(&mut inbox.mark_moved);
            (std::mem::take(&mut inbox.jobs), moved, inbox.stop)
        };
        if stop {
            return None;
        }
        Some((jobs, mark_moved))
    }

    /// Wakes the requests whose writes are safe now (`waits.rs`); `mark_moved`: the thread's
    /// registration was woken from another thread.
    #[inline(always)]
    fn settle_safe_waits(&mut self, mark_moved: bool) {
        if let Some(p) = self.persist {
            settle_safe_waits(p, &mut self.watch, &self.mark_waker, mark_moved);
        }
    }

    /// Makes a task of each new connection, to be polled in this turn.
    #[inline(always)]
    fn start_tasks(&mut self, jobs: Vec<Job>) {
        let (tasks, free) = (&mut self.tasks, &mut self.free);
        for job in jobs {
            let id = free.pop().unwrap_or_else(|| {
                tasks.push(None);
                tasks.len() - 1
            });
            let waker = Waker::from(Arc::new(TaskWaker {
                id,
                shared: Arc::clone(&self.shared),
            }));
            tasks[id] = Some(Task {
                future: job(),
                waker,
                turn: 0,
            });
            self.this_turn.push(id);
        }
    }

    /// Polls the tasks woken since the last turn, once each, and writes the log records they
    /// appended; returns how many it polled.
    #[inline(always)]
    fn poll_ready_tasks(&mut self) -> usize {
        let Turns {
            persist,
            mark_waker,
            watch,
            tasks,
            free,
            this_turn,
            turn,
            ..
        } = self;
        READY.with(|r| this_turn.append(&mut r.borrow_mut().ids));
        // Two passes at most: the woken tasks, then (async mode) the ones this turn's log
        // write acknowledged, so that their replies enter the ring in this same turn instead
        // of costing another `io_uring_enter`.
        let mut polled = 0usize;
        for pass in 0..2 {
            for id in this_turn.drain(..) {
                let Some(Some(task)) = tasks.get_mut(id) else {
                    continue;
                };
                if task.turn == *turn {
                    continue;
                }
                task.turn = *turn;
                polled += 1;
                let mut cx = Context::from_waker(&task.waker);
                if task.future.as_mut().poll(&mut cx).is_ready() {
                    // Dropped here, outside any borrow of the driver: its ops are cancelled.
                    tasks[id] = None;
                    free.push(id);
                }
            }
            // The log records the requests appended go to the kernel now (async mode; a
            // no-op otherwise); the requests waiting for them are woken locally. After the
            // last pass too: a thread never sleeps on records it appended.
            let Some(p) = *persist else { break };
            p.write_ready();
            settle_safe_waits(p, watch, mark_waker, false);
            if pass == 1 {
                break;
            }
            READY.with(|r| this_turn.append(&mut r.borrow_mut().ids));
            if this_turn.is_empty() {
                break;
            }
            *turn += 1;
        }
        polled
    }

    /// After a turn that answered connections (`polled` > 0): sends the replies now and yields
    /// the core once, if the gate is open.
    #[inline(always)]
    fn yield_after_answering(&mut self, polled: usize) -> io::Result<()> {
        // A turn that answered connections sends its replies now and yields the core once
        // before it reaps the next completions, so that the clients its replies woke run and
        // the next turn finds more requests: beside the suite's load generator that took
        // p99 (and mostly CPU per op) down. But the kernel's scheduler (EEVDF) moves a
        // yielding thread's deadline back by a time slice at each yield, so beside processes
        // that are often runnable (rpc-perf's threads) a yield every turn lost the server
        // most of its share of the core (19K instead of 49K of 60K requests/s offered). So
        // the yield is gated: only while yields come back quickly (`YieldGate`;
        // docs/decisions/0006-a-gated-yield-after-each-turn.md).
        let gate = &mut self.gate;
        let yield_now = polled > 0
            && gate
                .as_mut()
                .is_some_and(|g| g.open(std::time::Instant::now));
        if yield_now {
            let queued = with_driver(|d| !d.ring.submission().is_empty());
            if queued {
                entered(with_driver(|d| d.ring.submit()))?;
            }
            let t0 = std::time::Instant::now();
            // SAFETY: takes no arguments and touches no memory of ours.
            unsafe { libc::sched_yield() };
            if let Some(g) = gate.as_mut() {
                let t1 = std::time::Instant::now();
                g.yielded(t1 - t0, t1);
            }
        }
        Ok(())
    }

    /// One `io_uring_enter`: submits what the turn queued, and waits for a completion unless a
    /// task is ready or something waits in the inbox.
    #[inline(always)]
    fn enter_ring(&self) -> io::Result<()> {
        let shared = &self.shared;
        let more = READY.with(|r| !r.borrow().ids.is_empty());
        let entered_ring = if more {
            with_driver(|d| d.ring.submit())
        } else {
            shared.sleeping.store(true, SeqCst);
            let pending = {
                let inbox = shared.inbox.lock();
                !inbox.woken.is_empty() || !inbox.jobs.is_empty() || inbox.mark_moved || inbox.stop
            };
            let r = if pending {
                with_driver(|d| d.ring.submit())
            } else {
                with_driver(|d| d.ring.submit_and_wait(1))
            };
            shared.sleeping.store(false, SeqCst);
            r
        };
        entered(entered_ring)
    }

    /// Reaps the completions and wakes their tasks; returns whether the eventfd read completed
    /// (it must be queued again).
    #[inline(always)]
    fn reap_and_wake(&mut self) -> bool {
        let (completions, wakers) = (&mut self.completions, &mut self.wakers);
        // Reap, then wake outside the driver's borrow.
        let rearm = with_driver(|d| {
            completions.extend(
                d.ring
                    .completion()
                    .map(|c| (c.user_data(), c.result(), c.flags())),
            );
            let mut rearm = false;
            for (data, res, flags) in completions.drain(..) {
                match data {
                    EVENTFD => rearm = true,
                    CANCEL => {}
                    r if r & RELEASE != 0 => {
                        // Emptied (or already empty): the slot can take another socket.
                        if let Some(free) = d.fixed.as_mut() {
                            free.push((r & !RELEASE) as u32);
                        }
                    }
                    id => wakers.extend(d.complete(id as usize, res, flags)),
                }
            }
            rearm
        });
        for w in wakers.drain(..) {
            w.wake();
        }
        rearm
    }
}

/// An `io_uring_enter`'s result: interrupted (EINTR) or busy (EBUSY: completions must be
/// reaped first) is no error, the next turn enters again.
#[inline(always)]
fn entered(r: io::Result<usize>) -> io::Result<()> {
    match r {
        Ok(_) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EINTR) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Ok(()),
        Err(e) => Err(e),
    }
}

/// After the last turn.
fn tear_down(tasks: Vec<Option<Task>>) {
    // Tasks left (none after a graceful stop) are dropped with their ops cancelled; the ring
    // goes with the thread, and the kernel cancels whatever is still in flight. Buffers of
    // ops not reported done yet are leaked rather than freed under the kernel.
    drop(tasks);
    if let Some(d) = DRIVER.with(|d| d.borrow_mut().take()) {
        drop(d.ring);
        std::mem::forget(d.slots);
        std::mem::forget(d.bufs);
    }
}

/// How many registered file slots a ring gets: the descriptor limit bounds the table.
fn fixed_file_slots() -> u32 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into a live struct of ours.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 0;
    }
    let cap = FIXED_FILES_MAX;
    // A test switch: a smaller table.
    #[cfg(feature = "test-hooks")]
    let cap = crate::test_hooks::fixed_files().unwrap_or(cap);
    limit.rlim_cur.min(FIXED_FILES_MAX).min(cap) as u32
}
