//! The article's payment scenario on MemoryStore: a provider that charges in 300 ms, and a
//! client that retries 50 ms after its first request, while that request still runs.
//!
//! Run with `cargo run -p idem-driver --example charge`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem::record::{Command, Reply};
use idem::{
    Claim, Coordinator, Error, Fingerprint, InFlightPolicy, Key, MemoryStore, Operation, Options,
    Provenance, Store, StoreError,
};
use serde::{Deserialize, Serialize};

const CHARGE_TAKES: Duration = Duration::from_millis(300);
const RETRY_AFTER: Duration = Duration::from_millis(50);

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Charge {
    id: String,
    amount: u64,
}

#[derive(Debug, thiserror::Error)]
#[error("provider timed out")]
struct ProviderTimeout;

/// The payment provider: every charge goes on the card statement.
#[derive(Debug, Default)]
struct Provider {
    statement: Mutex<Vec<String>>,
}

impl Provider {
    async fn charge(&self, amount: u64, claim: &Claim) -> Charge {
        tokio::time::sleep(CHARGE_TAKES).await;
        let mut statement = self.statement.lock().unwrap_or_else(|e| e.into_inner());
        let id = format!("ch_{}", statement.len() + 1);
        // The provider is handed the idempotency key, to deduplicate on its own too.
        statement.push(format!("{id} (key {})", claim.key()));
        Charge { id, amount }
    }

    fn charges(&self) -> Vec<String> {
        self.statement
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// A store that cannot be reached: Redis is down.
#[derive(Debug)]
struct Unreachable;

impl Store for Unreachable {
    async fn apply(&self, _: &Operation, _: &Key, command: Command) -> Result<Reply, StoreError> {
        Err(StoreError::unavailable(&command, "connection refused"))
    }
}

fn fingerprint(order: &str, amount: u64) -> Fingerprint {
    Fingerprint::builder()
        .field("order_id", order)
        .field("amount", amount)
        .finish()
        .expect("strings and integers always encode")
}

type Answer = Result<Charge, Error<ProviderTimeout>>;

async fn charge<S: Store>(
    payments: &Coordinator<S>,
    provider: &Arc<Provider>,
    key: &str,
    amount: u64,
) -> Answer {
    // The action runs on a task of its own (`execute` is detached), so it owns what it
    // uses: a client that hangs up cannot stop a charge half-way.
    let provider = Arc::clone(provider);
    payments
        .execute(
            "payment.charge",
            key,
            fingerprint("o-1", amount),
            move |claim| async move { Ok(provider.charge(amount, &claim).await) },
        )
        .await
}

fn show(answer: &Answer) -> String {
    match answer {
        Ok(charge) => charge.id.clone(),
        Err(Error::InProgress) => "InProgress (409)".to_owned(),
        Err(Error::KeyReuse { .. }) => "KeyReuse (422)".to_owned(),
        Err(error) => error.to_string(),
    }
}

/// Two requests with one key, the second 50 ms after the first.
async fn retry_while_running(policy: InFlightPolicy) -> Result<(), Box<dyn std::error::Error>> {
    let payments = Coordinator::new(
        MemoryStore::new(),
        Options::builder().in_flight(policy).build()?,
    );
    let provider = Arc::new(Provider::default());
    let first = {
        let (payments, provider) = (payments.clone(), provider.clone());
        tokio::spawn(async move { charge(&payments, &provider, "order-1", 100).await })
    };
    tokio::time::sleep(RETRY_AFTER).await;
    let second = charge(&payments, &provider, "order-1", 100).await;
    let first = first.await?;
    println!(
        "in_flight={policy:?}  responses=[{}, {}]  charges made={:?}",
        show(&first),
        show(&second),
        provider.charges()
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("The first request is still running when the retry arrives:");
    retry_while_running(InFlightPolicy::Wait).await?;
    retry_while_running(InFlightPolicy::Raise).await?;

    println!("\nThe key does not describe the request; the fingerprint does:");
    let payments = Coordinator::new(MemoryStore::new(), Options::default());
    let provider = Arc::new(Provider::default());
    let first = charge(&payments, &provider, "order-1", 100).await;
    let same = charge(&payments, &provider, "order-1", 100).await;
    let other = charge(&payments, &provider, "order-1", 5).await;
    println!(
        "same key, same amount  -> {} then {}",
        show(&first),
        show(&same)
    );
    println!(
        "same key, amount 5     -> {}, charges made={}",
        show(&other),
        provider.charges().len()
    );

    println!("\nFailures are not cached:");
    let payments = Coordinator::new(MemoryStore::new(), Options::default());
    let provider = Arc::new(Provider::default());
    let failed: Answer = payments
        .execute(
            "payment.charge",
            "order-2",
            fingerprint("o-2", 100),
            |_claim| async { Err(ProviderTimeout) },
        )
        .await;
    let retried = charge(&payments, &provider, "order-2", 100).await;
    println!("first call  -> {}", show(&failed));
    println!(
        "second call -> {}, charges made={}",
        show(&retried),
        provider.charges().len()
    );

    println!("\nThe store is unreachable (fail open, the default):");
    let payments = Coordinator::new(Unreachable, Options::default());
    let provider = Arc::new(Provider::default());
    let charging = Arc::clone(&provider);
    let outcome = payments
        .execute_with_provenance(
            "payment.charge",
            "order-3",
            fingerprint("o-3", 100),
            move |claim| async move { Ok::<_, ProviderTimeout>(charging.charge(100, &claim).await) },
        )
        .await?;
    let unprotected = matches!(outcome.provenance, Provenance::ExecutedUnprotected { .. });
    println!(
        "the action ran anyway: {}, charges made={}, unprotected={unprotected}, store errors={}",
        outcome.value.id,
        provider.charges().len(),
        payments.metrics().store_errors.total()
    );
    Ok(())
}
