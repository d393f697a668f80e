//! Without a ring, a traced future runs untraced: no slot, the same
//! output, and its snaps go where the thread's go (the sink).

use std::{
    future::Future,
    pin::pin,
    task::{Context, Poll, Waker},
};

use librip::{Ring, coroutine::Cursor, tokio::TracedExt};

#[test]
fn without_a_ring_a_traced_future_runs_untraced() {
    assert!(Ring::get().is_none());
    let mut fut = pin!(
        async {
            librip::snap!();
            Cursor::current().is_sink()
        }
        .traced("untraced")
    );
    assert!(fut.coroutine().is_none() && fut.id().is_none());
    let out = fut.as_mut().poll(&mut Context::from_waker(Waker::noop()));
    assert_eq!(out, Poll::Ready(true), "snapped into the sink");
}
