//! The subcommands, each generic over the store ([`AdminStore`]), each ending in a
//! [`Report`]: the text an operator reads, the JSON a script reads, the exit code.

use std::io::{BufRead, IsTerminal, Write};
use std::time::Duration;

use idem::admin::{
    AdminStore, Cursor, Inspection, ListFilter, ListQuery, RecordState, Released, Status,
};
use idem::record::{Record, StoredResult};
use idem::{Key, Operation};
use serde_json::{Value, json};

use crate::args::Target;
use crate::error::{CliError, exit};
use crate::render::{self, cell, cut, wrap};

/// What a subcommand found: text, JSON, exit code.
#[derive(Debug)]
pub struct Report {
    /// For a person.
    pub text: String,
    /// For a script (`--json`).
    pub json: Value,
    /// The process's exit code ([`exit`]).
    pub code: u8,
}

/// A subcommand's record: its operation (scoped by tenant, if given) and key.
pub fn target(target: &Target) -> Result<(Operation, Key), CliError> {
    let base = Operation::new(&target.operation)
        .map_err(|e| CliError::Input(format!("operation {:?}: {e}", target.operation)))?;
    let operation = match &target.tenant {
        Some(tenant) => base
            .for_tenant(tenant)
            .map_err(|e| CliError::Input(format!("operation {:?}: {e}", target.operation)))?,
        None => base,
    };
    let key =
        Key::new(&target.key).map_err(|e| CliError::Input(format!("key {:?}: {e}", target.key)))?;
    Ok((operation, key))
}

/// `idem inspect`.
pub async fn inspect<S: AdminStore>(
    store: &S,
    operation: &Operation,
    key: &Key,
    show_body: bool,
) -> Result<Report, CliError> {
    let inspection = store.inspect(operation, key).await?;
    Ok(Report {
        text: inspection_text(store, operation, key, &inspection, show_body),
        json: inspection_json(store, operation, key, &inspection, show_body),
        code: exit::OK,
    })
}

fn inspection_json<S: AdminStore>(
    store: &S,
    operation: &Operation,
    key: &Key,
    inspection: &Inspection,
    show_body: bool,
) -> Value {
    let (name, scope) = operation.tenant_scope();
    let mut out = json!({
        "store": store.kind(),
        "operation": name,
        "tenant_scope": scope,
        "key": key.as_str(),
        "state": inspection.state().name(),
        "store_now_ms": inspection.now.as_millis(),
    });
    if let Some(record) = &inspection.record {
        out["record"] = record_json(record, inspection, show_body);
    }
    out
}

fn record_json(record: &Record, inspection: &Inspection, show_body: bool) -> Value {
    let left = inspection.time_left().map_or(0, |left| {
        u64::try_from(left.as_millis()).unwrap_or(u64::MAX)
    });
    let mut out = json!({
        "owner": record.owner().to_string(),
        "fingerprint": record.fingerprint().to_string(),
        "expires_at_ms": record.expires_at().as_millis(),
    });
    match record {
        Record::Pending { fence, .. } => {
            out["lease_left_ms"] = json!(left);
            out["fence"] = json!(fence.map(|fence| fence.get()));
        }
        Record::Completed { result, .. } => {
            out["retention_left_ms"] = json!(left);
            out["result"] = json!(match result {
                StoredResult::Value(_) => "value",
                StoredResult::NotStored => "not_stored",
                StoredResult::Panicked => "panicked",
            });
            if let Some(body) = result.value() {
                out["body_bytes"] = json!(body.len());
                if show_body {
                    out["body"] = json!(render::body(body.as_bytes()));
                }
            }
        }
    }
    out
}

fn inspection_text<S: AdminStore>(
    store: &S,
    operation: &Operation,
    key: &Key,
    inspection: &Inspection,
    show_body: bool,
) -> String {
    let (name, scope) = operation.tenant_scope();
    let mut lines = vec![
        wrap("operation    ", 13, name),
        wrap("key          ", 13, key.as_str()),
    ];
    if let Some(scope) = scope {
        lines.push(format!("tenant scope {scope}"));
    }
    lines.push(format!("store        {}", store.kind()));
    lines.push(format!("state        {}", inspection.state()));
    let left = inspection.time_left().unwrap_or_default();
    match &inspection.record {
        None => lines.push(
            "             nothing under this key: the next request runs the action".to_owned(),
        ),
        Some(record) => {
            lines.push(format!("owner        {}", record.owner()));
            match record {
                Record::Pending { fence, .. } => {
                    if let Some(fence) = fence {
                        lines.push(format!("fence        {fence}"));
                    }
                    lines.push(match inspection.state() {
                        RecordState::Expired => format!(
                            "lease        ran out {} ago (store's clock); the next request \
                             takes the key over",
                            render::duration(
                                inspection
                                    .now
                                    .saturating_duration_since(record.expires_at())
                            )
                        ),
                        _ => format!("lease left   {} (store's clock)", render::duration(left)),
                    });
                }
                Record::Completed { result, .. } => {
                    lines.push(format!(
                        "retention    {} left (store's clock)",
                        render::duration(left)
                    ));
                    lines.push(match result {
                        StoredResult::Value(body) if body.len() < 1024 => {
                            format!("result       {} bytes", body.len())
                        }
                        StoredResult::Value(body) => format!(
                            "result       {} ({} bytes)",
                            render::size(body.len() as u64),
                            body.len()
                        ),
                        StoredResult::NotStored => {
                            "result       not stored (over the limit or not encodable)".to_owned()
                        }
                        StoredResult::Panicked => {
                            "result       outcome unknown: the action panicked".to_owned()
                        }
                    });
                }
            }
            lines.push(format!("fingerprint  {}", record.fingerprint()));
            if let (true, Some(body)) = (show_body, result_body(record)) {
                lines.push("body".to_owned());
                lines.push(wrap("  ", 2, &render::body(body)));
            }
        }
    }
    lines.join("\n")
}

fn result_body(record: &Record) -> Option<&[u8]> {
    match record {
        Record::Completed { result, .. } => result.value().map(|body| body.as_bytes()),
        Record::Pending { .. } => None,
    }
}

/// `idem list`.
pub async fn list<S: AdminStore>(
    store: &S,
    operation: Option<&str>,
    all: bool,
    limit: u32,
    after: Option<String>,
) -> Result<Report, CliError> {
    let operation = operation
        .map(Operation::new)
        .transpose()
        .map_err(|e| CliError::Input(format!("operation: {e}")))?;
    let query = ListQuery {
        operation,
        filter: if all {
            ListFilter::All
        } else {
            ListFilter::InFlight
        },
        after: after.map(Cursor),
        limit,
    };
    let page = store.list(&query).await?;
    let mut rows = Vec::new();
    let mut text = vec![format!(
        "{}{}{}{}{}",
        cell("STATE", 10),
        cell("LEFT", 11),
        cell("FENCE", 7),
        cell("OPERATION", 26),
        "KEY"
    )];
    for listed in &page.records {
        let state = RecordState::of(&listed.record, page.now);
        let expires = listed.record.expires_at();
        let left = match state {
            RecordState::Expired => format!(
                "-{}",
                render::duration(page.now.saturating_duration_since(expires))
            ),
            _ => render::duration(expires.saturating_duration_since(page.now)),
        };
        let fence = match &listed.record {
            Record::Pending {
                fence: Some(fence), ..
            } => fence.to_string(),
            _ => "-".to_owned(),
        };
        let (name, scope) = listed.operation.tenant_scope();
        let shown = match scope {
            Some(scope) => format!("{name}~{}", &scope[..6.min(scope.len())]),
            None => name.to_owned(),
        };
        text.push(format!(
            "{}{}{}{}{}",
            cell(state.name(), 10),
            cell(&left, 11),
            cell(&fence, 7),
            cell(&shown, 26),
            cut(listed.key.as_str(), render::WIDTH - 54)
        ));
        let inspection = Inspection {
            now: page.now,
            record: Some(listed.record.clone()),
        };
        let mut row = record_json(&listed.record, &inspection, false);
        row["operation"] = json!(name);
        row["tenant_scope"] = json!(scope);
        row["key"] = json!(listed.key.as_str());
        row["state"] = json!(state.name());
        rows.push(row);
    }
    if page.records.is_empty() {
        text.push(if all {
            "(no records)".to_owned()
        } else {
            "(no keys in flight)".to_owned()
        });
    }
    for key in &page.corrupt {
        text.push(wrap(
            "corrupt   ",
            10,
            &format!("{key}: a value this store did not write (left as it is)"),
        ));
    }
    if let Some(next) = &page.next {
        text.push(wrap("next page ", 10, &format!("--after '{}'", next.0)));
    }
    Ok(Report {
        text: text.join("\n"),
        json: json!({
            "store": store.kind(),
            "store_now_ms": page.now.as_millis(),
            "records": rows,
            "corrupt": page.corrupt,
            "next": page.next.map(|next| next.0),
        }),
        code: exit::OK,
    })
}

/// How `release` may ask before a write that can let an action run again.
#[derive(Debug, Clone, Copy)]
pub struct Confirm {
    /// `--force`: a live lease may be released.
    pub force: bool,
    /// `--completed`: a completed record may be deleted.
    pub completed: bool,
    /// `--yes`: do not ask.
    pub yes: bool,
}

/// `idem release`.
pub async fn release<S: AdminStore>(
    store: &S,
    operation: &Operation,
    key: &Key,
    confirm: Confirm,
) -> Result<Report, CliError> {
    let inspection = store.inspect(operation, key).await?;
    let state = inspection.state();
    let done = |text: String, outcome: &str, code: u8| Report {
        json: json!({
            "store": store.kind(),
            "operation": operation.as_str(),
            "key": key.as_str(),
            "state": state.name(),
            "outcome": outcome,
        }),
        text,
        code,
    };
    let Some(record) = inspection.record.as_ref() else {
        return Ok(done(
            "nothing to release: the key is free; the next request runs the action".to_owned(),
            "free",
            exit::OK,
        ));
    };
    let owner = record.owner();
    let left = render::duration(inspection.time_left().unwrap_or_default());
    match state {
        RecordState::Absent => Ok(done(
            "nothing to release: the record's retention ran out; the key is free".to_owned(),
            "free",
            exit::OK,
        )),
        RecordState::Expired => {
            // The lease ran out: the holder can no longer complete (I9), so deleting the
            // record changes nothing but the store's size. The store checks both again.
            if store.forget(operation, key, owner).await? {
                Ok(done(
                    "released: the lease had run out; the next request runs the action".to_owned(),
                    "released",
                    exit::OK,
                ))
            } else {
                Ok(done(changed(), "changed", exit::REFUSED))
            }
        }
        RecordState::Pending if !confirm.force => Ok(done(
            wrap(
                "",
                0,
                &format!(
                    "refused: the lease has {left} left and its holder (owner {owner}) may \
                     still be running the action. Wait for the lease to run out, or use \
                     --force if you know the holder is gone."
                ),
            ),
            "refused",
            exit::REFUSED,
        )),
        RecordState::Pending => {
            let warning = format!(
                "The lease of this key has {left} left: its holder (owner {owner}) may still \
                 be running the action. Releasing it now lets the next request with this key \
                 run the action again, a second charge, message or order, unless the \
                 provider deduplicates on the downstream key or refuses the holder's stale \
                 fence. The holder's own complete will then be refused."
            );
            if !ask(&warning, confirm.yes)? {
                return Ok(done(
                    "not released".to_owned(),
                    "not_confirmed",
                    exit::REFUSED,
                ));
            }
            match store.release(operation, key, owner).await? {
                Released::Released => Ok(done(
                    "released: the next request runs the action".to_owned(),
                    "released",
                    exit::OK,
                )),
                Released::Changed => Ok(done(changed(), "changed", exit::REFUSED)),
            }
        }
        RecordState::Completed | RecordState::Panicked if !confirm.completed => Ok(done(
            wrap(
                "",
                0,
                &format!(
                    "refused: the key is {state} ({left} of retention left); its requests \
                     are answered from the record. release never deletes a completed record \
                     unless asked with --completed."
                ),
            ),
            "refused",
            exit::REFUSED,
        )),
        RecordState::Completed | RecordState::Panicked => {
            let warning = format!(
                "This key is {state}: its action ran{}. Deleting the record makes the next \
                 request with this key run the action again, a second effect, and answers \
                 it with a new result.",
                if state == RecordState::Panicked {
                    " (or may have: it panicked)"
                } else {
                    ""
                }
            );
            if !ask(&warning, confirm.yes)? {
                return Ok(done(
                    "not deleted".to_owned(),
                    "not_confirmed",
                    exit::REFUSED,
                ));
            }
            if store.forget(operation, key, owner).await? {
                Ok(done(
                    "deleted: the next request runs the action".to_owned(),
                    "deleted",
                    exit::OK,
                ))
            } else {
                Ok(done(changed(), "changed", exit::REFUSED))
            }
        }
    }
}

fn changed() -> String {
    "nothing done: the record changed since it was read; inspect it again".to_owned()
}

/// Prints `warning` and asks for `yes` on the terminal, unless `yes` was given already.
fn ask(warning: &str, yes: bool) -> Result<bool, CliError> {
    if yes {
        return Ok(true);
    }
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(CliError::Input(
            "this needs a confirmation and stdin is not a terminal: pass --yes".to_owned(),
        ));
    }
    let mut err = std::io::stderr();
    writeln!(err, "{}", wrap("", 0, warning))?;
    write!(err, "Type yes to go on: ")?;
    err.flush()?;
    let mut answer = String::new();
    stdin.lock().read_line(&mut answer)?;
    Ok(answer.trim() == "yes")
}

/// `idem sweep`.
pub async fn sweep<S: AdminStore>(store: &S, batch: u32, quiet: bool) -> Result<Report, CliError> {
    let batch = batch.max(1);
    let bar = if quiet || !std::io::stderr().is_terminal() {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new_spinner()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} swept {pos} expired records ({per_sec})",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    let mut swept = 0u64;
    let result = loop {
        match store.sweep(batch).await {
            Ok(deleted) => {
                swept += deleted;
                bar.inc(deleted);
                if deleted < u64::from(batch) {
                    break Ok(());
                }
            }
            Err(error) => break Err(error),
        }
    };
    bar.finish_and_clear();
    result?;
    Ok(Report {
        text: format!("swept {swept} expired records"),
        json: json!({ "store": store.kind(), "swept": swept }),
        code: exit::OK,
    })
}

/// `idem health`.
pub async fn health<S: AdminStore>(store: &S) -> Result<Report, CliError> {
    let health = store.health().await?;
    let mut text = vec![format!("{} — {}", store.kind(), health.status().name())];
    for check in &health.checks {
        let first = format!("{}{}", cell(check.status.name(), 6), cell(&check.name, 18));
        text.push(wrap(&first, 24, &check.detail));
    }
    let checks: Vec<Value> = health
        .checks
        .iter()
        .map(|check| {
            json!({ "name": check.name, "status": check.status.name(), "detail": check.detail })
        })
        .collect();
    Ok(Report {
        text: text.join("\n"),
        json: json!({
            "store": store.kind(),
            "status": health.status().name(),
            "checks": checks,
        }),
        code: if health.status() == Status::Fail {
            exit::REFUSED
        } else {
            exit::OK
        },
    })
}

/// `idem stats`.
pub async fn stats<S: AdminStore>(store: &S) -> Result<Report, CliError> {
    let stats = store.stats().await?;
    let mut text = vec![format!(
        "{}{}{}{}{}{}{}",
        cell("OPERATION", 24),
        cell("PENDING", 8),
        cell("EXPIRED", 8),
        cell("DONE", 8),
        cell("PANICKED", 9),
        cell("RESULTS", 11),
        "LARGEST"
    )];
    let mut rows = Vec::new();
    for op in &stats.operations {
        text.push(format!(
            "{}{}{}{}{}{}{}",
            cell(&op.operation, 24),
            cell(&op.pending.to_string(), 8),
            cell(&op.expired.to_string(), 8),
            cell(&op.completed.to_string(), 8),
            cell(&op.panicked.to_string(), 9),
            cell(&render::size(op.body_bytes), 11),
            cut(&render::size(op.largest_body), 12)
        ));
        rows.push(json!({
            "operation": op.operation,
            "pending": op.pending,
            "expired": op.expired,
            "completed": op.completed,
            "panicked": op.panicked,
            "body_bytes": op.body_bytes,
            "largest_body": op.largest_body,
        }));
    }
    if stats.operations.is_empty() {
        text.push("(no records)".to_owned());
    }
    if stats.corrupt > 0 {
        text.push(format!(
            "{} key(s) hold a value this store did not write",
            stats.corrupt
        ));
    }
    Ok(Report {
        text: text.join("\n"),
        json: json!({ "store": store.kind(), "operations": rows, "corrupt": stats.corrupt }),
        code: exit::OK,
    })
}
