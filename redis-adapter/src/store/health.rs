//! Whether the server may evict idem's keys: [`RedisStore::health`], and the reading of
//! `maxmemory-policy` that connecting also makes (see
//! [`EvictionCheck`](super::EvictionCheck)).
//!
//! Every key the store writes has a TTL, so every `maxmemory-policy` but `noeviction` lets
//! Redis drop a live reservation or a stored result when memory runs short (the
//! `volatile-*` policies choose among keys with a TTL, the `allkeys-*` policies among all
//! keys). The next call for that key then finds it free and runs the action again: a
//! second effect that nothing reports. Under `noeviction` Redis refuses writes instead
//! (`OOM`), which the store reports as unavailable, and the attempt's policy decides.

use std::time::Duration;

use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::{RedisError, ServerError, Value};
use thiserror::Error;

use super::RedisStore;
use super::connection::Connection;

/// The only `maxmemory-policy` under which Redis never evicts a key.
pub const NO_EVICTION: &str = "noeviction";

/// The `maxmemory-policy` of every node the store writes to, read when
/// [`RedisStore::health`] was called.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    nodes: Vec<NodePolicy>,
}

impl Health {
    /// Each node's policy, ordered by node: the one server of a standalone store, or every
    /// master of a Cluster.
    pub fn nodes(&self) -> &[NodePolicy] {
        &self.nodes
    }

    /// Whether any node may evict idem's keys, and so run an action again: its policy is
    /// not `noeviction`.
    pub fn can_evict(&self) -> bool {
        self.nodes.iter().any(NodePolicy::can_evict)
    }

    /// The nodes whose policy may evict idem's keys.
    pub fn evicting(&self) -> impl Iterator<Item = &NodePolicy> {
        self.nodes.iter().filter(|node| node.can_evict())
    }
}

/// One node's `maxmemory-policy`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePolicy {
    node: String,
    policy: String,
}

impl NodePolicy {
    /// The node, `host:port` (as the client reaches it).
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Its `maxmemory-policy`, lower case, as the node reported it (`noeviction`,
    /// `allkeys-lru`, `volatile-ttl`, ...).
    pub fn policy(&self) -> &str {
        &self.policy
    }

    /// Whether the policy may evict idem's keys: every policy but `noeviction` (a policy
    /// this crate does not know is taken to evict).
    pub fn can_evict(&self) -> bool {
        self.policy != NO_EVICTION
    }
}

/// [`RedisStore::health`] could not tell every node's policy.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum HealthError {
    /// A node answered `CONFIG GET maxmemory-policy`, but not with its policy. Where
    /// `CONFIG` is disabled or renamed (managed Redis), check the policy by hand.
    #[error("could not read the maxmemory-policy of Redis node {node}: {source}")]
    PolicyUnknown {
        /// The node, `host:port`.
        node: String,
        /// What it answered.
        #[source]
        source: PolicyReadError,
    },
    /// The command could not be sent or answered (connection lost, no node known).
    #[error("could not ask Redis for its maxmemory-policy: {0}")]
    Unavailable(#[source] RedisError),
    /// No answer within the store's command timeout.
    #[error("no answer to CONFIG GET maxmemory-policy within {0:?}")]
    Timeout(Duration),
}

/// Why a node's answer to `CONFIG GET maxmemory-policy` is not its policy.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PolicyReadError {
    /// The node answered with an error: `CONFIG` is disabled or renamed (as on many managed
    /// services), or the user's ACL does not allow it.
    #[error("CONFIG GET maxmemory-policy was refused ({0}); CONFIG may be disabled or renamed")]
    Refused(#[source] RedisError),
    /// The node answered something else than the policy.
    #[error("CONFIG GET maxmemory-policy answered {0}, which is not a policy")]
    UnexpectedReply(String),
}

/// What reading the policies found: each node's policy or why it is unknown.
pub(super) type Readings = Vec<(String, Result<String, PolicyReadError>)>;

/// The command could not be sent or answered at all.
pub(super) enum Unreachable {
    Failed(RedisError),
    Timeout(Duration),
}

impl RedisStore {
    /// Reads `maxmemory-policy` again from the server, or from every master of a Cluster,
    /// and reports whether any of them may evict idem's keys ([`Health::can_evict`]).
    ///
    /// An operator may change the policy at any time (`CONFIG SET`), and a lazily built
    /// store ([`connect_lazy`](crate::RedisStoreBuilder::connect_lazy)) never checked it:
    /// call this from the service's health or readiness check, and treat an evicting node
    /// as a fault, since an evicted key runs its action again.
    ///
    /// Bounded by the store's command timeout. A node that answers with an error (`CONFIG`
    /// disabled or renamed) is [`HealthError::PolicyUnknown`].
    ///
    /// On a Cluster, the masters are those of the client's slot map, each asked on the
    /// client's connection to it (redis-rs leaves out a master it holds no connection to);
    /// replicas are not asked, so check a replica's policy before it may be promoted.
    pub async fn health(&self) -> Result<Health, HealthError> {
        let readings = read_policies(
            &self.inner.connection,
            self.inner.address.as_deref(),
            self.inner.command_timeout,
        )
        .await
        .map_err(|unreachable| match unreachable {
            Unreachable::Failed(error) => HealthError::Unavailable(error),
            Unreachable::Timeout(timeout) => HealthError::Timeout(timeout),
        })?;
        let nodes = readings
            .into_iter()
            .map(|(node, policy)| match policy {
                Ok(policy) => Ok(NodePolicy { node, policy }),
                Err(source) => Err(HealthError::PolicyUnknown { node, source }),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Health { nodes })
    }
}

/// Sends `CONFIG GET maxmemory-policy` to the standalone server (named `address`) or to
/// every master of the Cluster, within `timeout`; the readings are ordered by node.
pub(super) async fn read_policies(
    connection: &Connection,
    address: Option<&str>,
    timeout: Duration,
) -> Result<Readings, Unreachable> {
    let command = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .clone();
    let call = async {
        match connection {
            Connection::Standalone(manager) => {
                let node = address.unwrap_or("the Redis server").to_owned();
                match command.query_async::<Value>(&mut manager.clone()).await {
                    Ok(value) => Ok(vec![(node, policy_from(value))]),
                    Err(error) => match ServerError::try_from(error) {
                        Ok(refusal) => {
                            Ok(vec![(node, Err(PolicyReadError::Refused(refusal.into())))])
                        }
                        Err(error) => Err(Unreachable::Failed(error)),
                    },
                }
            }
            Connection::Cluster(cluster) => {
                let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                match cluster.clone().route_command(command, routing).await {
                    Ok(value) => Ok(per_master(value)),
                    Err(error) => Err(Unreachable::Failed(error)),
                }
            }
        }
    };
    let mut readings = tokio::time::timeout(timeout, call)
        .await
        .map_err(|_| Unreachable::Timeout(timeout))??;
    readings.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(readings)
}

/// A Cluster's answer to a command sent to every master without a response policy: a map
/// from each master's address to its own answer.
fn per_master(value: Value) -> Readings {
    match value {
        Value::Map(answers) => answers
            .into_iter()
            .map(|(node, answer)| (text(&node).unwrap_or_else(|| format!("{node:?}")), answer))
            .map(|(node, answer)| (node, policy_from(answer)))
            .collect(),
        other => vec![(
            "the Cluster".to_owned(),
            Err(PolicyReadError::UnexpectedReply(format!("{other:?}"))),
        )],
    }
}

/// The policy in one node's answer: `[name, value]` (RESP2) or `{name: value}` (RESP3).
fn policy_from(value: Value) -> Result<String, PolicyReadError> {
    let unexpected = |value: &Value| PolicyReadError::UnexpectedReply(format!("{value:?}"));
    let pairs = match value {
        Value::Map(pairs) => pairs,
        Value::Array(items) => {
            let mut items = items.into_iter();
            let mut pairs = Vec::new();
            while let (Some(name), Some(value)) = (items.next(), items.next()) {
                pairs.push((name, value));
            }
            pairs
        }
        Value::ServerError(refusal) => return Err(PolicyReadError::Refused(refusal.into())),
        other => return Err(unexpected(&other)),
    };
    pairs
        .iter()
        .find(|(name, _)| {
            text(name).is_some_and(|name| name.eq_ignore_ascii_case("maxmemory-policy"))
        })
        .and_then(|(_, policy)| text(policy))
        .map(|policy| policy.to_ascii_lowercase())
        .ok_or_else(|| unexpected(&Value::Map(pairs)))
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) | Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn the_policy_is_read_from_either_protocol() {
        let resp2 = Value::Array(vec![bulk("maxmemory-policy"), bulk("allkeys-lru")]);
        let resp3 = Value::Map(vec![(bulk("maxmemory-policy"), bulk("noeviction"))]);
        assert_eq!(policy_from(resp2).ok().as_deref(), Some("allkeys-lru"));
        assert_eq!(policy_from(resp3).ok().as_deref(), Some("noeviction"));
    }

    #[test]
    fn an_answer_without_the_policy_is_unexpected() {
        for value in [
            Value::Array(vec![]),
            Value::Array(vec![bulk("maxmemory")]),
            Value::Array(vec![bulk("maxmemory"), bulk("0")]),
            Value::Int(1),
        ] {
            assert!(matches!(
                policy_from(value),
                Err(PolicyReadError::UnexpectedReply(_))
            ));
        }
    }

    #[test]
    fn every_policy_but_noeviction_can_evict() {
        let node = |policy: &str| NodePolicy {
            node: "n:1".to_owned(),
            policy: policy.to_owned(),
        };
        assert!(!node("noeviction").can_evict());
        for policy in [
            "allkeys-lru",
            "volatile-ttl",
            "volatile-lfu",
            "something-new",
        ] {
            assert!(node(policy).can_evict(), "{policy}");
        }
        let health = Health {
            nodes: vec![node("noeviction"), node("volatile-lru")],
        };
        assert!(health.can_evict());
        assert_eq!(health.evicting().count(), 1);
    }
}
