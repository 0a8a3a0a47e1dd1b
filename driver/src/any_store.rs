//! [`AnyStore`]: any [`Store`] behind one type, chosen at run time.
//!
//! [`Store`] returns `impl Future` from its methods, which keeps every call free of boxing
//! but makes `dyn Store` impossible. A service that picks `MemoryStore` or Redis at start-up
//! wraps either in an `AnyStore`, so its handlers name one coordinator type. Each command
//! then costs one allocation for its boxed future.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use idem_core::record::{Command, Reply};
use idem_core::{Key, Operation};

use crate::store::{Store, StoreError};

type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The object-safe face of a [`Store`].
trait DynStore: Send + Sync + 'static {
    fn apply_boxed<'a>(
        &'a self,
        operation: &'a Operation,
        key: &'a Key,
        command: Command,
    ) -> Boxed<'a, Result<Reply, StoreError>>;

    fn apply_bounded_boxed<'a>(
        &'a self,
        operation: &'a Operation,
        key: &'a Key,
        command: Command,
    ) -> Boxed<'a, Result<Reply, StoreError>>;

    fn changed_boxed<'a>(&'a self, operation: &'a Operation, key: &'a Key) -> Boxed<'a, ()>;

    fn watch_boxed<'a>(&'a self, operation: &'a Operation, key: &'a Key) -> Boxed<'a, ()>;

    fn type_name(&self) -> &'static str;
}

impl<S: Store> DynStore for S {
    fn apply_boxed<'a>(
        &'a self,
        operation: &'a Operation,
        key: &'a Key,
        command: Command,
    ) -> Boxed<'a, Result<Reply, StoreError>> {
        Box::pin(self.apply(operation, key, command))
    }

    fn apply_bounded_boxed<'a>(
        &'a self,
        operation: &'a Operation,
        key: &'a Key,
        command: Command,
    ) -> Boxed<'a, Result<Reply, StoreError>> {
        Box::pin(self.apply_bounded(operation, key, command))
    }

    fn changed_boxed<'a>(&'a self, operation: &'a Operation, key: &'a Key) -> Boxed<'a, ()> {
        // Called now, so the store's watch starts now (the contract of `changed`).
        Box::pin(self.changed(operation, key))
    }

    fn watch_boxed<'a>(&'a self, operation: &'a Operation, key: &'a Key) -> Boxed<'a, ()> {
        Box::pin(self.watch(operation, key))
    }

    fn type_name(&self) -> &'static str {
        std::any::type_name::<S>()
    }
}

/// Any [`Store`], chosen at run time.
///
/// ```
/// use idem::{AnyStore, Coordinator, MemoryStore, Options};
///
/// let redis_url: Option<&str> = None; // from the service's configuration
/// let store = match redis_url {
///     None => AnyStore::new(MemoryStore::new()),
///     Some(_url) => unimplemented!("AnyStore::new(idem_redis::RedisStore::connect(url).await?)"),
/// };
/// let payments: Coordinator<AnyStore> = Coordinator::new(store, Options::default());
/// ```
#[derive(Clone)]
pub struct AnyStore(Arc<dyn DynStore>);

impl AnyStore {
    /// Wraps `store`.
    pub fn new(store: impl Store) -> Self {
        Self(Arc::new(store))
    }
}

impl fmt::Debug for AnyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("AnyStore")
            .field(&self.0.type_name())
            .finish()
    }
}

impl Store for AnyStore {
    fn apply<'a>(
        &'a self,
        operation: &'a Operation,
        key: &'a Key,
        command: Command,
    ) -> impl Future<Output = Result<Reply, StoreError>> + Send + 'a {
        self.0.apply_boxed(operation, key, command)
    }

    fn apply_bounded<'a>(
        &'a self,
        operation: &'a Operation,
        key: &'a Key,
        command: Command,
    ) -> impl Future<Output = Result<Reply, StoreError>> + Send + 'a {
        self.0.apply_bounded_boxed(operation, key, command)
    }

    fn changed<'a>(
        &'a self,
        operation: &'a Operation,
        key: &'a Key,
    ) -> impl Future<Output = ()> + Send + 'a {
        self.0.changed_boxed(operation, key)
    }

    fn watch<'a>(
        &'a self,
        operation: &'a Operation,
        key: &'a Key,
    ) -> impl Future<Output = ()> + Send + 'a {
        self.0.watch_boxed(operation, key)
    }
}
