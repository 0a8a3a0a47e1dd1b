//! A waiting call's watch on the holder's record: which of the store's watches the call
//! waits on, and when each is made.
//!
//! The first wait of a call watches with [`Store::changed`], made after the "in flight"
//! reply. Each reserve the call sends again while it waits is preceded by [`Store::watch`],
//! so the watch is registered before the reserve and a change between its reply and the
//! wait is never lost. A watch is kept until the next one exists (even once it resolved), so
//! the store's registration for the key stays up across the steps of a wait.
//!
//! [`Store::changed`]: crate::Store::changed
//! [`Store::watch`]: crate::Store::watch

use std::future::Future;
use std::pin::Pin;

use futures::FutureExt;
use futures::future::{Fuse, FusedFuture};

/// A store's watch on a key, boxed so that `changed` and `watch` share one slot.
pub(crate) type Watch<'a> = Fuse<Pin<Box<dyn Future<Output = ()> + Send + 'a>>>;

/// The watch of one call, if it holds one.
#[derive(Default)]
pub(crate) struct Watching<'a> {
    watch: Option<Watch<'a>>,
}

impl<'a> Watching<'a> {
    /// Before a reserve that a waiting call sends again: a watch from now on (`make`, the
    /// store's `watch`), unless the one held has not resolved (made earlier, it covers this
    /// reserve too).
    pub(crate) fn before_reserve<F>(&mut self, make: impl FnOnce() -> F)
    where
        F: Future<Output = ()> + Send + 'a,
    {
        if self.spent() {
            self.watch = Some(make().boxed().fuse());
        }
    }

    /// At a wait: with notices, the watch to wait on, made now (`make`, the store's
    /// `changed`) if none is held or the held one resolved; without, none is kept.
    pub(crate) fn for_wait<F>(
        &mut self,
        notices: bool,
        make: impl FnOnce() -> F,
    ) -> Option<&mut Watch<'a>>
    where
        F: Future<Output = ()> + Send + 'a,
    {
        if !notices {
            self.watch = None;
            return None;
        }
        if self.spent() {
            self.watch = Some(make().boxed().fuse());
        }
        self.watch.as_mut()
    }

    fn spent(&self) -> bool {
        self.watch.as_ref().is_none_or(FusedFuture::is_terminated)
    }
}
