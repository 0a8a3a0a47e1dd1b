//! The article's scenarios and the concurrency checks, through the driver's `Coordinator`,
//! written once and run on standalone Redis and on a Cluster.
//!
//! The provider is a card processor that keeps the card statement (`idem_check`'s): every
//! check is on that statement, not on what the callers were told.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem::{Coordinator, Error, Fingerprint, InFlightPolicy, Options};
use idem_check::Statement;
use idem_redis::RedisStore;

/// A payment provider whose charges take `latency` and go on its statement.
#[derive(Debug, Clone)]
pub struct Provider {
    statement: Arc<Mutex<Statement<String>>>,
    latency: Duration,
}

impl Provider {
    pub fn new(latency: Duration) -> Self {
        Self {
            statement: Arc::default(),
            latency,
        }
    }

    /// Charges the card under `key`: one effect, whose id is returned.
    pub async fn charge(&self, key: &str) -> Result<String, String> {
        tokio::time::sleep(self.latency).await;
        let mut statement = self.statement.lock().unwrap();
        Ok(statement.charge(key.to_owned(), None, 0).id.clone())
    }

    /// How many charges in all.
    pub fn charges(&self) -> u32 {
        self.statement.lock().unwrap().len() as u32
    }

    /// The statement as it stands.
    pub fn statement(&self) -> Statement<String> {
        self.statement.lock().unwrap().clone()
    }
}

pub fn coordinator(store: &RedisStore, policy: InFlightPolicy) -> Coordinator<RedisStore> {
    let options = Options::builder().in_flight(policy).build().unwrap();
    Coordinator::new(store.clone(), options)
}

fn amount(n: u64) -> Fingerprint {
    Fingerprint::builder()
        .field("order_id", "o-1")
        .field("amount", n)
        .finish()
        .unwrap()
}

/// The article's table: the provider takes 300 ms, the client gives up after 50 ms and
/// retries with the same key while the first attempt still runs.
///
/// Returns the two answers and the number of charges.
pub async fn article(
    store: &RedisStore,
    key: &str,
    policy: InFlightPolicy,
) -> (
    Result<String, Error<String>>,
    Result<String, Error<String>>,
    u32,
) {
    let payments = coordinator(store, policy);
    let provider = Provider::new(Duration::from_millis(300));
    let call = || {
        let payments = payments.clone();
        let provider = provider.clone();
        let key = key.to_owned();
        async move {
            payments
                .execute("payment.charge", key, amount(100), |claim| async move {
                    provider.charge(claim.key().as_str()).await
                })
                .await
        }
    };
    let first = tokio::spawn(call());
    tokio::time::sleep(Duration::from_millis(50)).await;
    let retry = tokio::spawn(call());
    let (first, retry) = (first.await.unwrap(), retry.await.unwrap());
    (first, retry, provider.charges())
}

/// `wait`: one charge, and both callers get `ch_1`.
pub async fn article_wait(store: &RedisStore, key: &str) {
    let (first, retry, charges) = article(store, key, InFlightPolicy::Wait).await;
    assert_eq!(charges, 1);
    assert_eq!(first.unwrap(), "ch_1");
    assert_eq!(retry.unwrap(), "ch_1");
}

/// `raise`: one charge; the retry gets `InProgress` (HTTP 409).
pub async fn article_raise(store: &RedisStore, key: &str) {
    let (first, retry, charges) = article(store, key, InFlightPolicy::Raise).await;
    assert_eq!(charges, 1);
    assert_eq!(first.unwrap(), "ch_1");
    let error = retry.unwrap_err();
    assert!(matches!(error, Error::InProgress), "{error:?}");
    assert_eq!(error.http_status(), Some(409));
}

/// After the first call finished: a retry replays, another request under the key is
/// refused (`I4`), and a failure is not cached (`I5`).
pub async fn sequential_rules(store: &RedisStore, key: &str) {
    let payments = coordinator(store, InFlightPolicy::Wait);
    let provider = Provider::new(Duration::ZERO);
    let charge = || {
        let provider = provider.clone();
        payments.execute("payment.charge", key, amount(100), |claim| async move {
            provider.charge(claim.key().as_str()).await
        })
    };
    assert_eq!(charge().await.unwrap(), "ch_1");
    assert_eq!(charge().await.unwrap(), "ch_1");
    let reused = payments
        .execute("payment.charge", key, amount(5), |_claim| async {
            Ok::<String, String>("never".into())
        })
        .await;
    assert!(matches!(reused, Err(Error::KeyReuse { .. })), "{reused:?}");
    assert_eq!(provider.charges(), 1);

    let failing_key = format!("{key}-fails");
    let failed = payments
        .execute(
            "payment.charge",
            &failing_key,
            amount(100),
            |_claim| async { Err::<String, String>("card declined".into()) },
        )
        .await;
    assert!(matches!(failed, Err(Error::Action(_))), "{failed:?}");
    let retried = payments
        .execute(
            "payment.charge",
            &failing_key,
            amount(100),
            |_claim| async { Ok::<String, String>("ch_after_failure".into()) },
        )
        .await;
    assert_eq!(retried.unwrap(), "ch_after_failure");
}

/// `keys` keys, `callers` concurrent callers each, all released at once: exactly one charge
/// per key, and every caller of a key gets the same charge id.
pub async fn concurrent_callers(store: &RedisStore, tag: &str, keys: usize, callers: usize) {
    let payments = coordinator(store, InFlightPolicy::Wait);
    let provider = Provider::new(Duration::from_millis(20));
    let start = Arc::new(tokio::sync::Barrier::new(keys * callers));
    let mut tasks = Vec::new();
    for k in 0..keys {
        for _ in 0..callers {
            let (payments, provider, start) = (payments.clone(), provider.clone(), start.clone());
            let key = format!("{tag}-{k}");
            tasks.push(tokio::spawn(async move {
                start.wait().await;
                let value = payments
                    .execute("payment.charge", &key, amount(100), |claim| async move {
                        provider.charge(claim.key().as_str()).await
                    })
                    .await;
                (k, value)
            }));
        }
    }
    let mut seen: Vec<Option<String>> = vec![None; keys];
    for task in tasks {
        let (k, value) = task.await.unwrap();
        let value = value.unwrap_or_else(|e| panic!("key {k}: {e}"));
        match &seen[k] {
            Some(first) => assert_eq!(first, &value, "key {k}: two answers"),
            None => seen[k] = Some(value),
        }
    }
    let keys: Vec<String> = (0..keys).map(|k| format!("{tag}-{k}")).collect();
    if let Err(failure) = provider.statement().one_effect_per_key(&keys) {
        panic!("{failure}");
    }
    let keys = keys.len();
    let metrics = payments.metrics();
    assert_eq!(metrics.executed as usize, keys, "{metrics:?}");
}
