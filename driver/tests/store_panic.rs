//! A store that panics while a detached call records its action (a bug of the store's, not
//! the action's): the panic reaches the caller once, as tokio would hand it over from a
//! spawned task, and the call's rest is never polled again. A call that panicked must not be
//! moved to a task of its own when the caller's future is dropped in the unwinding, where
//! its next poll would panic a second time on a worker.
//!
//! Its own test binary: it counts panics with a process-wide panic hook.

mod common;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Fault, FlakyStore, fingerprint};
use idem::{Coordinator, MemoryStore, Options};
use idem_core::record::CommandKind;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_panics_while_recording_panics_in_the_caller_once() {
    let panics = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&panics);
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        counted.fetch_add(1, Ordering::SeqCst);
        default(info);
    }));
    let store =
        FlakyStore::new(MemoryStore::new()).fault(CommandKind::Complete, 0..1, Fault::Panic);
    let coordinator = Coordinator::new(store, Options::default());
    let ran = Arc::new(AtomicUsize::new(0));
    let caller = {
        let (coordinator, ran) = (coordinator.clone(), Arc::clone(&ran));
        tokio::spawn(async move {
            coordinator
                .execute(
                    "payment.charge",
                    "k",
                    fingerprint("o", 1),
                    move |_claim| async move {
                        ran.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, Infallible>(1_u32)
                    },
                )
                .await
        })
    };
    let joined = caller
        .await
        .expect_err("the store's panic reaches the caller");
    assert!(joined.is_panic());
    // Time for a call's rest, had it been moved to a task of its own, to be polled there.
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let _ = std::panic::take_hook();
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    assert_eq!(
        panics.load(Ordering::SeqCst),
        1,
        "the call that panicked was polled again"
    );
}
