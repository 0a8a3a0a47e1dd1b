//! Transactional calls on `MemoryStore` (MODEL.md, "Effects that commit with the record"):
//! the action's writes commit with its record, or not at all. The transaction here is a
//! buffer of rows over an in-process table, committed under the table's lock only when the
//! record machine recorded the result; idem-postgres tests the same on PostgreSQL.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Fault, FlakyStore, ProviderTimeout, fingerprint};
use idem::record::{Command, Reply};
use idem::{
    AnyTransaction, Coordinator, Error, Key, MemoryStore, Operation, Options, Store, StoreError,
    Transaction, TransactionalStore,
};
use idem_core::record::CommandKind;

/// The service's own table: the rows committed so far.
#[derive(Debug, Default)]
struct Orders(Mutex<Vec<String>>);

/// Rows written but not committed, and where the record lives.
struct Pending<S> {
    orders: Arc<Orders>,
    store: Arc<S>,
    rows: Vec<String>,
}

impl<S: Store> Transaction for Pending<S> {
    async fn complete(
        self,
        operation: Operation,
        key: Key,
        command: Command,
    ) -> Result<Reply, StoreError> {
        let reply = self.store.apply(&operation, &key, command).await?;
        if idem::record::commits(&reply) {
            self.orders.0.lock().unwrap().extend(self.rows);
        }
        Ok(reply)
    }
}

fn options() -> Options {
    Options::builder()
        .lease(Duration::from_secs(1))
        .build()
        .unwrap()
}

/// Creates order `row` in a transaction that takes `takes`.
async fn create_order<S: Store>(
    coordinator: &Coordinator<S>,
    orders: &Arc<Orders>,
    row: &str,
    takes: Duration,
) -> Result<String, Error<ProviderTimeout>> {
    let (orders, store, row) = (
        Arc::clone(orders),
        Arc::clone(coordinator.store()),
        row.to_owned(),
    );
    coordinator
        .execute_in_transaction(
            "order.create",
            "k",
            fingerprint("o", 1),
            move |_claim| async move {
                tokio::time::sleep(takes).await;
                let transaction = Pending {
                    orders,
                    store,
                    rows: vec![row.clone()],
                };
                Ok::<_, ProviderTimeout>((row, transaction))
            },
        )
        .await
        .map(|answer| answer.value)
}

#[tokio::test(start_paused = true)]
async fn a_holder_whose_lease_was_taken_over_commits_nothing() {
    // Every renewal fails, so the first holder's lease runs out while it works.
    let store =
        FlakyStore::new(MemoryStore::new()).fault(CommandKind::Renew, 0..1_000, Fault::Fail);
    let coordinator = Coordinator::new(store, options()).with_seed(20);
    let orders = Arc::new(Orders::default());
    let paused = {
        let (coordinator, orders) = (coordinator.clone(), Arc::clone(&orders));
        tokio::spawn(async move {
            create_order(&coordinator, &orders, "paused", Duration::from_secs(3)).await
        })
    };
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let taker = create_order(&coordinator, &orders, "taker", Duration::from_millis(10)).await;
    assert_eq!(taker.unwrap(), "taker");
    let paused = paused.await.unwrap().unwrap_err();
    assert!(matches!(paused, Error::RolledBack), "{paused:?}");
    assert!(paused.is_retryable());
    assert_eq!(*orders.0.lock().unwrap(), ["taker"]);
    let counted = coordinator.metrics();
    assert_eq!(
        (counted.executed, counted.rolled_back, counted.lease_lost),
        (1, 1, 0)
    );
    // The retry the client makes replays the taker's order.
    let retry = create_order(&coordinator, &orders, "retry", Duration::ZERO).await;
    assert_eq!(retry.unwrap(), "taker");
}

/// The same run with a deliberately broken transaction that commits its rows whatever the
/// record machine answered: the one-row check above catches it.
struct CommitsAnyway<S>(Pending<S>);

impl<S: Store> Transaction for CommitsAnyway<S> {
    async fn complete(
        self,
        operation: Operation,
        key: Key,
        command: Command,
    ) -> Result<Reply, StoreError> {
        let inner = self.0;
        let reply = inner.store.apply(&operation, &key, command).await?;
        inner.orders.0.lock().unwrap().extend(inner.rows);
        Ok(reply)
    }
}

#[tokio::test(start_paused = true)]
async fn a_commit_without_the_owner_check_is_caught_writing_twice() {
    let store =
        FlakyStore::new(MemoryStore::new()).fault(CommandKind::Renew, 0..1_000, Fault::Fail);
    let coordinator = Coordinator::new(store, options()).with_seed(22);
    let orders = Arc::new(Orders::default());
    let run = |row: &'static str, takes: Duration| {
        let (coordinator, orders) = (coordinator.clone(), Arc::clone(&orders));
        let store = Arc::clone(coordinator.store());
        tokio::spawn(async move {
            coordinator
                .execute_in_transaction(
                    "order.create",
                    "k",
                    fingerprint("o", 1),
                    move |_claim| async move {
                        tokio::time::sleep(takes).await;
                        let pending = Pending {
                            orders,
                            store,
                            rows: vec![row.to_owned()],
                        };
                        Ok::<_, ProviderTimeout>((row.to_owned(), CommitsAnyway(pending)))
                    },
                )
                .await
        })
    };
    let paused = run("paused", Duration::from_secs(3));
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    run("taker", Duration::from_millis(10))
        .await
        .unwrap()
        .unwrap();
    let _ = paused.await.unwrap();
    assert_eq!(
        orders.0.lock().unwrap().len(),
        2,
        "the broken commit writes a second row"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failure_or_a_panic_rolls_back_and_the_retry_runs() {
    let coordinator = Coordinator::new(MemoryStore::new(), options()).with_seed(24);
    let orders = Arc::new(Orders::default());
    let failed = coordinator
        .execute_in_transaction("order.create", "k", fingerprint("o", 1), |_claim| async {
            Err::<(String, Pending<MemoryStore>), _>(ProviderTimeout)
        })
        .await;
    assert!(matches!(failed, Err(Error::Action(ProviderTimeout))));
    let panicked = {
        let coordinator = coordinator.clone();
        tokio::spawn(async move {
            coordinator
                .execute_in_transaction("order.create", "k", fingerprint("o", 1), |_claim| async {
                    if true {
                        panic!("in the middle of the writes");
                    }
                    Err::<(String, Pending<MemoryStore>), _>(ProviderTimeout)
                })
                .await
        })
    };
    assert!(panicked.await.unwrap_err().is_panic());
    // Nothing committed either time, and the key was given back each time.
    assert_eq!(
        common::read(&**coordinator.store(), "order.create", "k").await,
        None
    );
    let created = create_order(&coordinator, &orders, "third", Duration::ZERO).await;
    assert_eq!(created.unwrap(), "third");
    assert_eq!(*orders.0.lock().unwrap(), ["third"]);
    let counted = coordinator.metrics();
    assert_eq!(
        (counted.action_failed, counted.panicked, counted.executed),
        (1, 1, 1)
    );
}

/// An action that ends `Unknown` in a transaction: its writes roll back with the
/// transaction, so nothing happened, and the key is given back (unlike a plain call, where
/// `Unknown` is recorded as "outcome unknown").
#[tokio::test]
async fn an_unknown_ending_in_a_transaction_rolls_back_and_releases() {
    let coordinator = Coordinator::new(MemoryStore::new(), options());
    let orders = Arc::new(Orders::default());
    let handle = coordinator
        .operation::<String, ProviderTimeout>("order.create")
        .unwrap();
    let (rows, store) = (Arc::clone(&orders), Arc::clone(coordinator.store()));
    let first = handle
        .execute_in_transaction_with_ending("k", fingerprint("o", 1), move |_claim| async move {
            let transaction = Pending {
                orders: rows,
                store,
                rows: vec!["o-1".to_owned()],
            };
            // The transaction is dropped with the ending: nothing commits.
            drop(transaction);
            idem::Ending::<(String, Pending<MemoryStore>), _>::Unknown(ProviderTimeout)
        })
        .await;
    assert!(
        matches!(first, Err(Error::Action(ProviderTimeout))),
        "{first:?}"
    );
    assert!(orders.0.lock().unwrap().is_empty());
    let retry = create_order(&coordinator, &orders, "o-2", Duration::ZERO).await;
    assert_eq!(retry.unwrap(), "o-2", "released: the retry runs");
    assert_eq!(*orders.0.lock().unwrap(), ["o-2"]);
    let metrics = coordinator.metrics();
    assert_eq!((metrics.action_failed, metrics.action_unknown), (1, 0));
}

/// A store that begins its own transactions: `MemoryStore`'s records, with the orders
/// table beside them.
struct Shop {
    records: Arc<MemoryStore>,
    orders: Arc<Orders>,
}

impl Store for Shop {
    async fn apply(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<Reply, StoreError> {
        self.records.apply(operation, key, command).await
    }
}

impl TransactionalStore for Shop {
    type Transaction = Pending<MemoryStore>;

    async fn begin(&self) -> Result<Pending<MemoryStore>, idem::BoxError> {
        Ok(Pending {
            orders: Arc::clone(&self.orders),
            store: Arc::clone(&self.records),
            rows: Vec::new(),
        })
    }
}

/// A transaction begun by the store, carried as an `AnyTransaction` (as by a layer generic
/// over the store, which names neither): its rows commit with the record once, a failed
/// one's roll back, and the retry replays without writing.
#[tokio::test]
async fn a_transaction_the_store_begins_commits_with_the_record_through_any_transaction() {
    async fn order(
        coordinator: &Coordinator<Shop>,
        row: &'static str,
        fail: bool,
    ) -> Result<idem::Answer<String>, Error<ProviderTimeout>> {
        let store = Arc::clone(coordinator.store());
        let handle = coordinator
            .operation::<String, ProviderTimeout>("order.create")
            .unwrap();
        handle
            .execute_in_transaction("k", fingerprint("o", 1), move |_claim| async move {
                let mut transaction = store.begin().await.map_err(|_| ProviderTimeout)?;
                transaction.rows.push(row.to_owned());
                let transaction = AnyTransaction::new(transaction);
                if fail {
                    // Dropped: its row goes with it.
                    return Err(ProviderTimeout);
                }
                Ok((row.to_owned(), transaction))
            })
            .await
    }
    let orders = Arc::new(Orders::default());
    let shop = Shop {
        records: Arc::new(MemoryStore::new()),
        orders: Arc::clone(&orders),
    };
    let coordinator = Coordinator::new(shop, options());
    let failed = order(&coordinator, "o-0", true).await;
    assert!(matches!(failed, Err(Error::Action(ProviderTimeout))));
    assert!(orders.0.lock().unwrap().is_empty());
    let first = order(&coordinator, "o-1", false).await.unwrap();
    assert!(matches!(
        first.provenance,
        idem::Provenance::Executed { .. }
    ));
    let retry = order(&coordinator, "o-2", false).await.unwrap();
    assert_eq!(retry.value, "o-1");
    assert_eq!(retry.provenance, idem::Provenance::Replayed);
    assert_eq!(*orders.0.lock().unwrap(), ["o-1"]);
}
