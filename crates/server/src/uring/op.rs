//! One operation submitted to the thread's ring, as a future of the kernel's result and the
//! buffer back. Dropped before it is done (its connection ended), it is cancelled and its slot
//! keeps the buffer until the kernel reports it done.
//!
//! ```text
//!   Op::submit(buf, entry) ──> slot: Waiting { buf } ──(completion)──> Done { result, buf }
//!   poll: Done ─> Ready((result, buf)), the slot is freed; Waiting ─> keeps the task's waker
//!   drop before done: slot ─> Orphan { buf } + AsyncCancel; freed when the kernel is done
//! ```

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use io_uring::{opcode, squeue};

use super::driver::{Slot, CANCEL, DRIVER};

/// One submitted operation; resolves to the kernel's result and the buffer back.
pub(super) struct Op {
    pub(super) id: usize,
    pub(super) done: bool,
    /// Tied to the thread whose ring holds it.
    _local: std::marker::PhantomData<*const ()>,
}

impl Op {
    /// Submits `entry` (which points into `buf`'s heap memory) with `buf` kept in its slot.
    pub(super) fn submit(buf: Vec<u8>, entry: squeue::Entry) -> io::Result<Op> {
        DRIVER.with(|d| {
            let mut d = d.borrow_mut();
            let d = d
                .as_mut()
                .ok_or_else(|| io::Error::other("not an io_uring connection thread"))?;
            let id = d.slot();
            d.slots[id] = Slot::Waiting { waker: None, buf };
            if let Err(e) = d.push(&entry.user_data(id as u64)) {
                d.slots[id] = Slot::Free;
                d.free.push(id);
                return Err(e);
            }
            Ok(Op {
                id,
                done: false,
                _local: std::marker::PhantomData,
            })
        })
    }
}

impl Op {
    /// The op `id` of this thread's ring, submitted earlier and not yet polled to the end.
    pub(super) fn resume(id: usize) -> Op {
        Op {
            id,
            done: false,
            _local: std::marker::PhantomData,
        }
    }
}

impl Future for Op {
    type Output = (i32, Vec<u8>);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let id = self.id;
        let out = DRIVER.with(|d| {
            let mut d = d.borrow_mut();
            let d = d.as_mut().expect("io_uring op polled off its thread");
            match std::mem::replace(&mut d.slots[id], Slot::Free) {
                Slot::Done { result, buf } => {
                    d.free.push(id);
                    Some((result, buf))
                }
                Slot::Waiting { buf, .. } => {
                    d.slots[id] = Slot::Waiting {
                        waker: Some(cx.waker().clone()),
                        buf,
                    };
                    None
                }
                other => {
                    d.slots[id] = other;
                    None
                }
            }
        });
        match out {
            Some(out) => {
                self.done = true;
                Poll::Ready(out)
            }
            None => Poll::Pending,
        }
    }
}

impl Drop for Op {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let id = self.id;
        DRIVER.with(|d| {
            let Ok(mut d) = d.try_borrow_mut() else {
                return;
            };
            let Some(d) = d.as_mut() else {
                return;
            };
            match std::mem::replace(&mut d.slots[id], Slot::Free) {
                Slot::Waiting { buf, .. } => {
                    d.slots[id] = Slot::Orphan { _buf: buf };
                    let cancel = opcode::AsyncCancel::new(id as u64)
                        .build()
                        .user_data(CANCEL);
                    let _ = d.push(&cancel);
                }
                Slot::Done { .. } => d.free.push(id),
                other => d.slots[id] = other,
            }
        });
    }
}
