//! What an operator asks of a Redis store ([`idem::admin::AdminStore`]): every read goes
//! through the store's own read script, so records are decoded by this crate's codec and
//! judged at the server's clock, as the record machine judges them.
//!
//! Listing walks `SCAN … MATCH` over the standalone server or over every master of a
//! Cluster in turn, and reads each record key it finds. A page ends with the SCAN batch that
//! reaches the query's limit (SCAN cannot resume inside a batch without risking to skip a
//! key), so it may hold a few more records than asked for. A key whose lease or retention ran
//! out is gone from Redis (its expiry is its deadline), so a Redis listing never shows an
//! expired pending record, and there is nothing to sweep. SCAN's own guarantee carries
//! over: a record present for the whole listing is listed (on a Cluster, unless its slot
//! moved between masters meanwhile); one written or deleted during it may or may not be.

use idem::StoreError;
use idem::admin::{
    AdminError, AdminStore, Cursor, Health, HealthCheck, Inspection, ListPage, ListQuery, Status,
    StoreStats, clock_check, system_now,
};
use idem_core::record::{Command, Reply};
use idem_core::{Key, Operation, OwnerToken, Timestamp};
use redis::Value;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo, SingleNodeRoutingInfo};

use super::RedisStore;
use super::connection::{Bound, Connection};
use super::reply::UnexpectedReply;

/// The most keys one `SCAN` asks a node for.
const MAX_SCAN_COUNT: u32 = 1_000;

impl AdminStore for RedisStore {
    fn kind(&self) -> String {
        match &self.inner.connection {
            Connection::Standalone(_) => "redis".to_owned(),
            Connection::Cluster(_) => "redis cluster".to_owned(),
        }
    }

    async fn inspect(&self, operation: &Operation, key: &Key) -> Result<Inspection, AdminError> {
        let (reply, now) = self.apply_timed(operation, key, Command::Read).await?;
        Ok(Inspection {
            now,
            record: read_record(reply)?,
        })
    }

    async fn list(&self, query: &ListQuery) -> Result<ListPage, AdminError> {
        let nodes = self.nodes().await?;
        let (mut node, mut cursor) = match &query.after {
            None => (0, 0),
            Some(after) => resume(&nodes, after)?,
        };
        let pattern = self.inner.layout.scan_pattern(query.operation.as_ref());
        let limit = usize::try_from(query.limit.max(1)).unwrap_or(usize::MAX);
        let mut page = ListPage {
            now: Timestamp::ZERO,
            records: Vec::new(),
            next: None,
            corrupt: Vec::new(),
        };
        while node < nodes.len() && page.records.len() < limit {
            let count = query.limit.clamp(1, MAX_SCAN_COUNT);
            let (next, keys) = self.scan(&nodes[node], cursor, &pattern, count).await?;
            for redis_key in keys {
                self.read_listed(&redis_key, query, &mut page).await?;
            }
            if next == 0 {
                node += 1;
            }
            cursor = next;
        }
        if node < nodes.len() {
            page.next = Some(Cursor(format!("{}|{cursor}", nodes[node])));
        }
        if page.now == Timestamp::ZERO {
            page.now = self.server_now().await?;
        }
        Ok(page)
    }

    async fn forget(
        &self,
        operation: &Operation,
        key: &Key,
        owner: OwnerToken,
    ) -> Result<bool, AdminError> {
        let redis_key = self.inner.layout.record_key(operation, key);
        let command = Command::Release { owner };
        let args = [owner.to_bytes().to_vec()];
        let script = &self.inner.scripts.forget;
        match self
            .eval(&command, Bound::Backstop, script, &redis_key, &args)
            .await?
        {
            Value::Array(reply) => match reply.first() {
                Some(Value::BulkString(verb)) if verb == b"D" => Ok(true),
                Some(Value::BulkString(verb)) if verb == b"N" => Ok(false),
                Some(Value::BulkString(verb)) if verb == b"!" => Err(AdminError::Corrupt(format!(
                    "the record under {redis_key} is not one this store wrote: {}",
                    reply.get(2).and_then(text).unwrap_or_default()
                ))),
                _ => Err(unexpected("forget", &Value::Array(reply))),
            },
            other => Err(unexpected("forget", &other)),
        }
    }

    async fn stats(&self) -> Result<StoreStats, AdminError> {
        let mut stats = StoreStats::default();
        let mut query = ListQuery {
            filter: idem::admin::ListFilter::All,
            limit: 1024,
            ..ListQuery::in_flight()
        };
        loop {
            let page = self.list(&query).await?;
            for listed in &page.records {
                stats.add(listed.operation.as_str(), &listed.record, page.now);
            }
            stats.corrupt += page.corrupt.len() as u64;
            match page.next {
                Some(next) => query.after = Some(next),
                None => return Ok(stats),
            }
        }
    }

    async fn health(&self) -> Result<Health, AdminError> {
        let mut checks = Vec::new();
        checks.push(match RedisStore::health(self).await {
            Ok(health) if !health.can_evict() => HealthCheck::new(
                "eviction",
                Status::Ok,
                format!(
                    "maxmemory-policy noeviction on {} node(s): Redis refuses writes \
                     when full instead of dropping records",
                    health.nodes().len()
                ),
            ),
            Ok(health) => {
                let nodes: Vec<String> = health
                    .evicting()
                    .map(|node| format!("{} on {}", node.policy(), node.node()))
                    .collect();
                HealthCheck::new(
                    "eviction",
                    Status::Fail,
                    format!(
                        "maxmemory-policy {}: when memory runs short Redis may evict a \
                         live lease or a stored result, and the next call with that key \
                         runs the action again, a second effect nothing reports; set \
                         maxmemory-policy noeviction",
                        nodes.join(", ")
                    ),
                )
            }
            Err(error) => HealthCheck::new("eviction", Status::Warn, error.to_string()),
        });
        checks.push(HealthCheck::new(
            "layout",
            Status::Ok,
            format!(
                "layout 2, records under \"{}{{}}<operation>:<key>\", encoding {}",
                self.inner.layout.prefix(),
                if self.inner.fences {
                    "3 (fenced grants) and 2"
                } else {
                    "2"
                }
            ),
        ));
        checks.push(self.scripts_check().await?);
        let before = system_now();
        let store = self.server_now().await?;
        let after = system_now();
        checks.push(clock_check(before, store, after));
        checks.push(HealthCheck::new(
            "connections",
            Status::Ok,
            match &self.inner.connection {
                Connection::Standalone(_) => format!(
                    "one multiplexed connection to {}; notices {}",
                    self.inner.address.as_deref().unwrap_or("the server"),
                    if self.inner.notices.is_some() {
                        "on"
                    } else {
                        "off"
                    }
                ),
                Connection::Cluster(_) => format!(
                    "a Cluster client on {} master(s); notices {}",
                    self.nodes().await?.len(),
                    if self.inner.notices.is_some() {
                        "on"
                    } else {
                        "off"
                    }
                ),
            },
        ));
        Ok(Health { checks })
    }

    async fn sweep(&self, _batch: u32) -> Result<u64, AdminError> {
        Err(AdminError::Unsupported(
            "Redis drops every record at its deadline (the key's expiry): nothing to sweep"
                .to_owned(),
        ))
    }
}

impl RedisStore {
    /// The nodes a listing walks, sorted: `""` for the standalone server (the store's own
    /// connection), every master's `host:port` on a Cluster.
    async fn nodes(&self) -> Result<Vec<String>, AdminError> {
        match &self.inner.connection {
            Connection::Standalone(_) => Ok(vec![String::new()]),
            Connection::Cluster(cluster) => {
                let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                let echo = redis::cmd("ECHO").arg("idem").clone();
                let mut cluster = cluster.clone();
                let value = self
                    .admin_call(cluster.route_command(echo, routing))
                    .await?;
                let Value::Map(answers) = value else {
                    return Err(unexpected("ECHO to every master", &value));
                };
                let mut nodes: Vec<String> =
                    answers.iter().filter_map(|(node, _)| text(node)).collect();
                nodes.sort();
                Ok(nodes)
            }
        }
    }

    /// One `SCAN` on `node`: the next cursor (0 when the node is done) and the keys.
    async fn scan(
        &self,
        node: &str,
        cursor: u64,
        pattern: &str,
        count: u32,
    ) -> Result<(u64, Vec<String>), AdminError> {
        let scan = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(count)
            .arg("TYPE")
            .arg("string")
            .clone();
        let value = match &self.inner.connection {
            Connection::Standalone(manager) => {
                self.admin_call(scan.query_async::<Value>(&mut manager.clone()))
                    .await?
            }
            Connection::Cluster(cluster) => {
                let (host, port) = node
                    .rsplit_once(':')
                    .and_then(|(host, port)| Some((host.to_owned(), port.parse().ok()?)))
                    .ok_or_else(|| AdminError::Corrupt(format!("not a node address: {node}")))?;
                let routing =
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port });
                self.admin_call(cluster.clone().route_command(scan, routing))
                    .await?
            }
        };
        match value {
            Value::Array(mut reply) if reply.len() == 2 => {
                let keys = match reply.pop() {
                    Some(Value::Array(keys)) => keys.iter().filter_map(text).collect(),
                    other => return Err(unexpected("SCAN", &other.unwrap_or(Value::Nil))),
                };
                let next = reply
                    .pop()
                    .as_ref()
                    .and_then(text)
                    .and_then(|cursor| cursor.parse().ok())
                    .ok_or_else(|| unexpected("SCAN", &Value::Nil))?;
                Ok((next, keys))
            }
            other => Err(unexpected("SCAN", &other)),
        }
    }

    /// Reads the record under `redis_key` and adds it to `page` if `query` wants it.
    async fn read_listed(
        &self,
        redis_key: &str,
        query: &ListQuery,
        page: &mut ListPage,
    ) -> Result<(), AdminError> {
        let Some((operation, key)) = self.inner.layout.parse(redis_key) else {
            return Ok(());
        };
        let (reply, now) = match self.apply_timed(&operation, &key, Command::Read).await {
            Err(StoreError::Corrupt { key, .. }) => {
                page.corrupt.push(key);
                return Ok(());
            }
            other => other?,
        };
        page.now = page.now.max(now);
        if let Some(record) = read_record(reply)?
            && query.matches(&operation, idem::admin::RecordState::of(&record, now))
        {
            page.records.push(idem::admin::Listed {
                operation,
                key,
                record,
            });
        }
        Ok(())
    }

    /// The server's clock (on a Cluster, the clock of the master holding the probe key), read
    /// by the read script, as every command reads it, on a key no service writes.
    async fn server_now(&self) -> Result<Timestamp, AdminError> {
        let probe = Operation::new("idem.clock").map_err(|e| AdminError::Corrupt(e.to_string()))?;
        let key = Key::new("-").map_err(|e| AdminError::Corrupt(e.to_string()))?;
        let (_, now) = self.apply_timed(&probe, &key, Command::Read).await?;
        Ok(now)
    }

    /// Which of the store's scripts the server (every master) holds already.
    async fn scripts_check(&self) -> Result<HealthCheck, AdminError> {
        let scripts = &self.inner.scripts;
        let all = [
            &scripts.reserve,
            &scripts.reserve_fenced,
            &scripts.complete,
            &scripts.complete_own,
            &scripts.renew,
            &scripts.release,
            &scripts.read,
        ];
        let mut exists = redis::cmd("SCRIPT");
        exists.arg("EXISTS");
        for script in all {
            exists.arg(&script.sha1);
        }
        let value = match &self.inner.connection {
            Connection::Standalone(manager) => {
                self.admin_call(exists.query_async::<Value>(&mut manager.clone()))
                    .await?
            }
            Connection::Cluster(cluster) => {
                let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                self.admin_call(cluster.clone().route_command(exists, routing))
                    .await?
            }
        };
        let answers: Vec<Value> = match value {
            Value::Map(per_node) => per_node.into_iter().map(|(_, answer)| answer).collect(),
            single => vec![single],
        };
        let (mut held, mut asked) = (0, 0);
        for answer in &answers {
            let Value::Array(flags) = answer else {
                return Err(unexpected("SCRIPT EXISTS", answer));
            };
            asked += flags.len();
            held += flags
                .iter()
                .filter(|flag| matches!(flag, Value::Int(1)))
                .count();
        }
        Ok(HealthCheck::new(
            "scripts",
            Status::Ok,
            format!(
                "{held} of {asked} script copies loaded on {} node(s); a missing one is \
                 loaded by its first use (EVAL)",
                answers.len()
            ),
        ))
    }

    /// An operator's command on the store's connection, within its command timeout.
    async fn admin_call<T>(
        &self,
        call: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, AdminError> {
        let timeout = self.inner.command_timeout;
        match tokio::time::timeout(timeout, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(AdminError::Unavailable(error.into())),
            Err(_) => Err(AdminError::Unavailable(Box::new(idem::CommandTimeout(
                timeout,
            )))),
        }
    }
}

/// Where a listing resumes: the node named in the cursor and its SCAN cursor.
fn resume(nodes: &[String], after: &Cursor) -> Result<(usize, u64), AdminError> {
    let bad = || AdminError::Corrupt(format!("not a Redis listing cursor: {:?}", after.0));
    let (node, cursor) = after.0.rsplit_once('|').ok_or_else(bad)?;
    let cursor: u64 = cursor.parse().map_err(|_| bad())?;
    // A master that left the Cluster since: go on from the next one in order.
    let at = nodes.partition_point(|known| known.as_str() < node);
    let cursor = if nodes.get(at).is_some_and(|known| known == node) {
        cursor
    } else {
        0
    };
    Ok((at, cursor))
}

fn read_record(reply: Reply) -> Result<Option<idem_core::Record>, AdminError> {
    match reply {
        Reply::Read(record) => Ok(record),
        other => Err(AdminError::Corrupt(format!(
            "the read script answered {other:?}"
        ))),
    }
}

fn unexpected(what: &'static str, value: &Value) -> AdminError {
    AdminError::Unavailable(Box::new(UnexpectedReply {
        script: what,
        detail: format!("{value:?}"),
    }))
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) | Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}
