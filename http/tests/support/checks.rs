//! The draft's central rules as checks of any service on `POST /charges` (the layer, or a
//! deliberately broken stand-in): each returns what it found wrong, so that a test can
//! assert both that the layer passes and that a broken variant is caught.

use std::time::Duration;

use super::{Answer, Bank, order};

/// `POST base/charges` under `key` with `body`.
pub async fn post(base: &str, key: &str, body: &serde_json::Value) -> Answer {
    let response = reqwest::Client::new()
        .post(format!("{base}/charges"))
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("the server answers");
    Answer::of(response).await
}

fn charges_since(bank: &Bank, before: usize) -> usize {
    bank.charges() - before
}

/// A retry gets the first response's status, allow-listed headers and body byte for byte,
/// with `Idempotent-Replayed: true`, and none of the headers off the allow-list.
pub async fn replay_is_the_first_response(base: &str, bank: &Bank) -> Result<(), String> {
    let before = bank.charges();
    let first = post(base, "\"check-replay\"", &order(100)).await;
    let again = post(base, "\"check-replay\"", &order(100)).await;
    if charges_since(bank, before) != 1 {
        return Err(format!("charged {} times", charges_since(bank, before)));
    }
    if (again.status, &again.body) != (first.status, &first.body) {
        return Err(format!("the replay differs: {again:?} after {first:?}"));
    }
    if !again.replayed() {
        return Err("the replay does not say Idempotent-Replayed: true".to_owned());
    }
    for name in ["x-run", "set-cookie"] {
        if again.header(name).is_some() {
            return Err(format!(
                "the replay repeats {name}, which is not to be stored"
            ));
        }
    }
    Ok(())
}

/// The same key with another body is refused with 422 while the first request runs and
/// after it is done; never replayed, never run.
pub async fn reuse_is_refused_while_running_and_after(
    base: &str,
    bank: &Bank,
) -> Result<(), String> {
    bank.set_takes(Duration::from_millis(400));
    let before = bank.charges();
    let first = {
        let base = base.to_owned();
        tokio::spawn(async move { post(&base, "\"check-reuse\"", &order(100)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let during = post(base, "\"check-reuse\"", &order(5)).await;
    let first = first.await.map_err(|e| e.to_string())?;
    let after = post(base, "\"check-reuse\"", &order(5)).await;
    bank.set_takes(Duration::ZERO);
    if first.status != 201 {
        return Err(format!("the first request failed: {first:?}"));
    }
    for (when, answer) in [("while the first ran", during), ("after it", after)] {
        if answer.status != 422 {
            return Err(format!(
                "another body under a used key {when} got {}",
                answer.status
            ));
        }
    }
    match charges_since(bank, before) {
        1 => Ok(()),
        n => Err(format!("charged {n} times")),
    }
}

/// A duplicate sent while the first request runs gets the first's response (policy
/// `Wait`), and the card is charged once.
pub async fn a_concurrent_duplicate_gets_the_first_response(
    base: &str,
    bank: &Bank,
) -> Result<(), String> {
    bank.set_takes(Duration::from_millis(400));
    let before = bank.charges();
    let first = {
        let base = base.to_owned();
        tokio::spawn(async move { post(&base, "\"check-wait\"", &order(100)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = post(base, "\"check-wait\"", &order(100)).await;
    let first = first.await.map_err(|e| e.to_string())?;
    bank.set_takes(Duration::ZERO);
    match charges_since(bank, before) {
        1 => {}
        n => return Err(format!("charged {n} times")),
    }
    if (second.status, &second.body) != (first.status, &first.body) {
        return Err(format!("the duplicate got {second:?}, the first {first:?}"));
    }
    Ok(())
}

/// A 5xx is not recorded: the retry runs the handler again and gets its new answer.
pub async fn failures_are_not_recorded(base: &str, bank: &Bank) -> Result<(), String> {
    bank.fail_next(http::StatusCode::SERVICE_UNAVAILABLE);
    let failed = post(base, "\"check-failure\"", &order(100)).await;
    let retry = post(base, "\"check-failure\"", &order(100)).await;
    if failed.status != 503 {
        return Err(format!("the failure was not answered as such: {failed:?}"));
    }
    if retry.status != 201 {
        return Err(format!("the retry after a 503 got {}", retry.status));
    }
    Ok(())
}
